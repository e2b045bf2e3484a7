"""mmrlvr against TRL's GRPOTrainer on the same tiny Qwen2.5-VL, data and settings, side by side.

    pip install -e ".[bench]" && python benchmarks/vs_trl.py [--repeats 2] [--steps 8]

Both start from the same warm-started checkpoint, sample G = 8 completions for 8 prompts per step
(max 32 new tokens), use the same learning rate, loss (token-mean PPO-clip; "grpo" clips at
0.2/0.2, "dapo" at 0.2/0.28 with truncated completions masked), one update per step, no KL,
one CPU thread. Each run is its own process; runs alternate A B A B after a warm-up step. Prints
(and writes as JSON) median s/step, completions/s, peak RSS, generation vs update share, the
ratio mmrlvr/TRL, and reward and held-out accuracy after the same number of steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

B, G, MAX_NEW, LR = 8, 8, 32, 2e-4


def _settings(loss: str) -> dict:
    return {"clip_high": 0.28 if loss == "dapo" else 0.2, "mask_truncated": loss == "dapo"}


# ------------------------------------------------------------------------------------------ mmrlvr
def child_mmrlvr(warm: Path, loss: str, steps: int, out_dir: Path) -> dict:
    from common import peak_rss_mb

    from mmrlvr.config import load_config
    from mmrlvr.train.loop import train

    s = _settings(loss)
    cfg = load_config("configs/quickstart.yaml", [
        f"output_dir={out_dir}", "train.resume=false", f"warm_start.checkpoint={warm}",
        f"rollout.prompts_per_step={B}", f"rollout.group_size={G}", f"rollout.max_new_tokens={MAX_NEW}",
        f"train.lr={LR}", f"train.steps={steps}", "train.save_every=0", "algo.algorithm=grpo",
        f"algo.clip_high={s['clip_high']}", f"algo.mask_truncated={str(s['mask_truncated']).lower()}",
        "task.eval_size=8", "verifier_workers=0", "train.log_every=1000",
    ])
    summary = train(cfg)
    rows = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/step" in r]
    return {
        "step_s": [r["time/step"] for r in rows], "gen_s": [r["time/rollout"] for r in rows],
        "update_s": [r["time/update"] for r in rows], "reward": [r["reward/mean"] for r in rows],
        "peak_rss_mb": peak_rss_mb(), "model_dir": str(out_dir / "checkpoints" / f"step_{steps}"),
        "summary_wall_s": summary["wall_time_s"],
    }


# --------------------------------------------------------------------------------------------- TRL
def child_trl(warm: Path, loss: str, steps: int, out_dir: Path) -> dict:
    import torch
    from common import peak_rss_mb
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import vision_token_ids
    from mmrlvr.types import Sample
    from mmrlvr.verifiers.answer import count
    from mmrlvr.tasks import load_task

    torch.set_num_threads(1)
    model, processor = load_policy(str(warm))
    samples = load_task("counting", "train", 4096, 0)
    ds = Dataset.from_list([
        {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": s.messages[0]["content"][1]["text"]}]}],
         "image": s.images[0], "reference": s.reference}
        for s in samples[: B * (steps + 2)]
    ])

    def reward(completions, reference, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [count(t, Sample("x", (), r)).score for t, r in zip(texts, reference)]

    s = _settings(loss)
    args = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=B * G, num_generations=G,
        gradient_accumulation_steps=1, max_completion_length=MAX_NEW, learning_rate=LR,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        loss_type="dapo", epsilon=0.2, epsilon_high=s["clip_high"], beta=0.0, num_iterations=1,
        mask_truncated_completions=s["mask_truncated"], temperature=1.0, top_p=1.0, top_k=0,
        generation_kwargs={"suppress_tokens": vision_token_ids(processor.tokenizer)},
        max_steps=steps, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0,
        bf16=False, dataloader_num_workers=0, remove_unused_columns=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=ds, processing_class=processor)
    torch.set_num_threads(1)
    timing = {"gen": [], "step": []}
    original = trainer._generate_and_score_completions

    def timed(*a, **k):
        t0 = time.perf_counter()
        out = original(*a, **k)
        timing["gen"].append(time.perf_counter() - t0)
        return out

    trainer._generate_and_score_completions = timed

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            timing["step"].append(time.perf_counter() - self.t0)

    trainer.add_callback(StepTimer())
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    trainer.save_model(str(out_dir / "final"))
    processor.save_pretrained(str(out_dir / "final"))
    return {
        "step_s": timing["step"], "gen_s": timing["gen"],
        "update_s": [st - g for st, g in zip(timing["step"], timing["gen"])], "reward": rewards,
        "peak_rss_mb": peak_rss_mb(), "model_dir": str(out_dir / "final"),
    }


# ------------------------------------------------------------------------------------------ parent
def _run_child(fw: str, warm: Path, loss: str, steps: int, out_dir: Path) -> dict:
    res = out_dir / "result.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, __file__, "--child", fw, "--warm", str(warm), "--loss", loss,
           "--steps", str(steps), "--child-out", str(out_dir)]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads(res.read_text())


def _eval(model_dir: str) -> float:
    from mmrlvr.config import RolloutConfig
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.train.evaluate import evaluate
    from mmrlvr.verifiers.score import InProcessScorer
    from mmrlvr.tasks import load_task

    model, processor = load_policy(model_dir)
    samples = load_task("counting", "eval", 256, 0)
    return evaluate(HFRolloutEngine(model, processor), samples, InProcessScorer(), RolloutConfig(max_new_tokens=MAX_NEW))["accuracy"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8, help="measured steps per run (after 1 warm-up step)")
    ap.add_argument("--losses", default="grpo,dapo")
    ap.add_argument("--work", default="runs/bench_vs_trl")
    ap.add_argument("--out", default="benchmarks/results/vs_trl.json")
    ap.add_argument("--child")
    ap.add_argument("--warm")
    ap.add_argument("--loss", default="grpo")
    ap.add_argument("--child-out")
    args = ap.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(1)
        out = Path(args.child_out)
        out.mkdir(parents=True, exist_ok=True)
        fn = child_mmrlvr if args.child == "mmrlvr" else child_trl
        result = fn(Path(args.warm), args.loss, args.steps, out)
        (out / "result.json").write_text(json.dumps(result))
        return 0

    import torch
    from common import table, warm_start_dir

    torch.set_num_threads(1)
    work = Path(args.work)
    warm = warm_start_dir(work)
    steps = args.steps + 1
    report, rows = {"settings": {"prompts_per_step": B, "group_size": G, "max_new_tokens": MAX_NEW, "lr": LR,
                                 "measured_steps": args.steps, "warmup_steps": 1, "repeats": args.repeats,
                                 "threads": 1, "device": "cpu"}, "results": {}}, []
    import trl
    import transformers

    report["settings"]["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}
    for loss in args.losses.split(","):
        runs: dict = {"mmrlvr": [], "trl": []}
        for rep in range(args.repeats):
            for fw in ("mmrlvr", "trl"):  # A B A B
                r = _run_child(fw, warm, loss, steps, work / f"{loss}_{fw}_{rep}")
                runs[fw].append(r)
                print(f"{loss} {fw} run {rep}: median {statistics.median(r['step_s'][1:]):.2f} s/step", flush=True)
        per = {}
        for fw, rs in runs.items():
            step = [x for r in rs for x in r["step_s"][1:]]
            gen = [x for r in rs for x in r["gen_s"][1:]]
            upd = [x for r in rs for x in r["update_s"][1:]]
            per[fw] = {
                "framework": fw, "loss": loss, "s_per_step": statistics.median(step),
                "completions_per_s": B * G / statistics.median(step),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
                "gen_share": sum(gen) / max(sum(gen) + sum(upd), 1e-9),
                "reward_last": statistics.mean(rs[-1]["reward"][-3:]),
                "heldout_acc": _eval(rs[-1]["model_dir"]),
            }
        ratio = {"framework": "mmrlvr/TRL", "loss": loss}
        for key in ("s_per_step", "completions_per_s", "peak_rss_mb", "gen_share", "heldout_acc"):
            ratio[key] = per["mmrlvr"][key] / max(per["trl"][key], 1e-9)
        shown = {k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in ratio.items()}  # ratios, not MB
        rows += [per["mmrlvr"], per["trl"], shown]
        report["results"][loss] = {"mmrlvr": per["mmrlvr"], "trl": per["trl"], "ratio": ratio, "raw": runs}
    cols = [("loss", "loss", ""), ("framework", "framework", ""), ("s_per_step", "s/step", ".3f"),
            ("completions_per_s", "compl/s", ".1f"), ("peak_rss_mb", "peak RSS MB", ".0f"),
            ("gen_share", "gen share", ".2f"), ("reward_last", "reward (last 3)", ".3f"),
            ("heldout_acc", f"held-out acc after {steps} steps", ".3f")]
    print(table(rows, cols))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
