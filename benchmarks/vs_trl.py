"""mmrlvr against TRL's GRPOTrainer on the same tiny Qwen2.5-VL, data and settings, at several shapes.

    pip install -e ".[bench]"
    flock /work/heavy.lock python benchmarks/vs_trl.py --steps 3 --repeats 1 --scaling

Contenders, each its own process, from the same warm-started checkpoint, one CPU thread:
  mmrlvr       the loop of `mmrlvr train` (no gradient checkpointing: mmrlvr leaves it off)
  trl          TRL 1.16 `GRPOConfig` as configured by default: gradient_checkpointing=True
  trl_nogc     the same with gradient_checkpointing=False: equal settings to mmrlvr
Both sample G completions for 8 prompts per step, same learning rate and loss (token-mean
PPO-clip, clip 0.2, one update per step, no KL). Shapes vary one factor at a time from the base
(G = 8, 32 new tokens, 112 px images): G = 4 and 16, 128 new tokens, 448 px images (the
processor upscales the 112 px boards to 448x448 = 256 visual tokens on both sides). The first
step of each run is a warm-up and not counted. `--scaling` adds mmrlvr under
`torchrun` with 2 gloo processes vs 1 process on the same global batch.
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

B, LR = 8, 2e-4
BASE = {"group": 8, "max_new": 32, "px": 112}
SHAPES = [BASE, {**BASE, "group": 4}, {**BASE, "group": 16}, {**BASE, "max_new": 128}, {**BASE, "px": 448}]
FRAMEWORKS = ("mmrlvr", "trl", "trl_nogc")


def _pixels(px: int) -> dict:
    """Processor pixel bounds that put every 112 px board at px x px."""
    return {"min_pixels": px * px, "max_pixels": px * px}


# ------------------------------------------------------------------------------------------ mmrlvr
def child_mmrlvr(warm: Path, shape: dict, steps: int, out_dir: Path) -> dict:
    from common import peak_rss_mb

    from mmrlvr.config import load_config
    from mmrlvr.train.loop import train

    px = _pixels(shape["px"])
    cfg = load_config("configs/quickstart.yaml", [
        f"output_dir={out_dir}", "train.resume=false", f"warm_start.checkpoint={warm}",
        f"rollout.prompts_per_step={B}", f"rollout.group_size={shape['group']}",
        f"rollout.max_new_tokens={shape['max_new']}", f"model.min_pixels={px['min_pixels']}",
        f"model.max_pixels={px['max_pixels']}", f"train.lr={LR}", f"train.steps={steps}",
        "train.save_every=0", "algo.algorithm=grpo", "task.eval_size=8", "eval.batch_size=8",
        "verifier_workers=0", "train.log_every=1000",
    ])
    train(cfg)
    rows = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/step" in r]
    return {
        "step_s": [r["time/step"] for r in rows], "gen_s": [r["time/rollout"] for r in rows],
        "update_s": [r["time/update"] for r in rows], "reward": [r["reward/mean"] for r in rows],
        "mean_length": [r["rollout/mean_length"] for r in rows],
        "peak_rss_mb": peak_rss_mb(), "world": int(os.environ.get("WORLD_SIZE", 1)),  # the group may be gone by now
    }


# --------------------------------------------------------------------------------------------- TRL
def child_trl(warm: Path, shape: dict, steps: int, out_dir: Path, checkpointing: bool | None) -> dict:
    import torch
    from common import peak_rss_mb
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from mmrlvr.config import ModelConfig
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import vision_token_ids
    from mmrlvr.types import Sample
    from mmrlvr.verifiers.answer import count
    from mmrlvr.tasks import load_task

    torch.set_num_threads(1)
    model, processor = load_policy(ModelConfig(path=str(warm), **_pixels(shape["px"])))
    g = shape["group"]
    samples = load_task("counting", "train", 4096, 0)
    ds = Dataset.from_list([
        {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": s.messages[0]["content"][1]["text"]}]}],
         "image": s.images[0], "reference": s.reference}
        for s in samples[: B * (steps + 2)]
    ])

    def reward(completions, reference, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [count(t, Sample("x", (), r)).score for t, r in zip(texts, reference)]

    extra = {} if checkpointing is None else {"gradient_checkpointing": checkpointing}
    args = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=B * g, num_generations=g,
        gradient_accumulation_steps=1, max_completion_length=shape["max_new"], learning_rate=LR,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        loss_type="dapo", epsilon=0.2, epsilon_high=0.2, beta=0.0, num_iterations=1,
        mask_truncated_completions=False, temperature=1.0, top_p=1.0, top_k=0,
        generation_kwargs={"suppress_tokens": vision_token_ids(processor.tokenizer)},
        max_steps=steps, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0,
        bf16=False, dataloader_num_workers=0, remove_unused_columns=False, **extra,
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
    hist = trainer.state.log_history
    return {
        "step_s": timing["step"], "gen_s": timing["gen"],
        "update_s": [st - gen for st, gen in zip(timing["step"], timing["gen"])],
        "reward": [h["reward"] for h in hist if "reward" in h],
        "mean_length": [h["completions/mean_length"] for h in hist if "completions/mean_length" in h],
        "peak_rss_mb": peak_rss_mb(), "world": 1,
        "gradient_checkpointing": bool(args.gradient_checkpointing),
    }


# ------------------------------------------------------------------------------------------ parent
def _run_child(fw: str, warm: Path, shape: dict, steps: int, out_dir: Path, procs: int = 1) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = [__file__, "--child", fw, "--warm", str(warm), "--shape", json.dumps(shape),
            "--steps", str(steps), "--child-out", str(out_dir)]
    if procs > 1:  # torchrun: `accelerate launch` runs a CPU config as ONE process unless mpirun is set up
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs), *args]
    else:
        cmd = [sys.executable, *args]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    ranks = [json.loads(p.read_text()) for p in sorted(out_dir.glob("result_rank*.json"))]
    if len(ranks) != procs or any(r["world"] != procs for r in ranks):
        raise SystemExit(f"asked for {procs} processes, got {len(ranks)} result(s) with world sizes "
                         f"{[r['world'] for r in ranks]}: the launcher did not start a process group")
    res = ranks[0]
    res["peak_rss_mb_per_proc"] = [r["peak_rss_mb"] for r in ranks]
    res["peak_rss_mb"] = sum(res["peak_rss_mb_per_proc"])  # the job's total
    return res


def _summarise(fw: str, shape: dict, runs: list[dict]) -> dict:
    step = [x for r in runs for x in r["step_s"][1:]]
    gen = [x for r in runs for x in r["gen_s"][1:]]
    upd = [x for r in runs for x in r["update_s"][1:]]
    med = statistics.median(step)
    return {
        "framework": fw, **shape, "procs": runs[0]["world"], "s_per_step": med,
        "completions_per_s": B * shape["group"] / med, "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "gen_share": sum(gen) / max(sum(gen) + sum(upd), 1e-9),
        "mean_length": statistics.mean(x for r in runs for x in r["mean_length"][1:] or r["mean_length"]),
        "reward_last": statistics.mean(runs[-1]["reward"][-2:]),
    }


def _shape_name(shape: dict) -> str:
    return f"G{shape['group']}_tok{shape['max_new']}_px{shape['px']}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per run (after 1 warm-up step)")
    ap.add_argument("--shapes", default="all", choices=("all", "base", "none"),
                    help="'all', 'base', or 'none' (with --scaling: only the 2-vs-1 process row)")
    ap.add_argument("--scaling", action="store_true", help="add mmrlvr 2 processes vs 1 (gloo DDP)")
    ap.add_argument("--work", default="runs/bench_vs_trl")
    ap.add_argument("--out", default="benchmarks/results/vs_trl.json")
    ap.add_argument("--child")
    ap.add_argument("--warm")
    ap.add_argument("--shape")
    ap.add_argument("--child-out")
    args = ap.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(1)
        out = Path(args.child_out)
        out.mkdir(parents=True, exist_ok=True)
        shape = json.loads(args.shape)
        if args.child == "mmrlvr":
            result = child_mmrlvr(Path(args.warm), shape, args.steps, out)
        else:
            result = child_trl(Path(args.warm), shape, args.steps, out, None if args.child == "trl" else False)
        (out / f"result_rank{int(os.environ.get('RANK', 0))}.json").write_text(json.dumps(result))
        return 0

    import torch
    import transformers
    import trl
    from common import table, warm_start_dir

    torch.set_num_threads(1)
    work = Path(args.work)
    warm = warm_start_dir(work)
    steps = args.steps + 1
    report = {"settings": {"prompts_per_step": B, "lr": LR, "measured_steps": args.steps, "warmup_steps": 1,
                           "repeats": args.repeats, "threads": 1, "device": "cpu",
                           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                        "trl": trl.__version__}},
              "results": {}}
    rows = []
    for shape in {"all": SHAPES, "base": [BASE], "none": []}[args.shapes]:
        runs: dict = {fw: [] for fw in FRAMEWORKS}
        for rep in range(args.repeats):
            for fw in FRAMEWORKS:  # A B C A B C
                r = _run_child(fw, warm, shape, steps, work / f"{_shape_name(shape)}_{fw}_{rep}")
                runs[fw].append(r)
                print(f"{_shape_name(shape)} {fw} run {rep}: median {statistics.median(r['step_s'][1:]):.2f} s/step", flush=True)
        per = {fw: _summarise(fw, shape, rs) for fw, rs in runs.items()}
        ratios = {}
        for ref in ("trl", "trl_nogc"):
            ratios[ref] = {"speedup": per[ref]["s_per_step"] / per["mmrlvr"]["s_per_step"],
                           "rss_ratio": per["mmrlvr"]["peak_rss_mb"] / per[ref]["peak_rss_mb"]}
            per["mmrlvr"][f"speedup_vs_{ref}"] = ratios[ref]["speedup"]
            per["mmrlvr"][f"rss_vs_{ref}"] = ratios[ref]["rss_ratio"]
        rows += list(per.values())
        report["results"][_shape_name(shape)] = {**per, "ratios": ratios, "raw": runs}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))  # the shapes are kept even if scaling fails
    if args.scaling:
        one = _run_child("mmrlvr", warm, BASE, steps, work / "scaling_1proc")
        two = _run_child("mmrlvr", warm, BASE, steps, work / "scaling_2proc", procs=2)
        scale = {"1proc": _summarise("mmrlvr", BASE, [one]), "2proc": _summarise("mmrlvr", BASE, [two])}
        scale["speedup_2_over_1"] = scale["1proc"]["s_per_step"] / scale["2proc"]["s_per_step"]
        scale["2proc"]["peak_rss_mb_per_proc"] = two["peak_rss_mb_per_proc"]
        report["scaling"] = scale
        rows += [{**scale["1proc"], "framework": "mmrlvr 1 proc"}, {**scale["2proc"], "framework": "mmrlvr 2 procs"}]
    cols = [("framework", "framework", ""), ("group", "G", "d"), ("max_new", "max new", "d"), ("px", "px", "d"),
            ("procs", "procs", "d"), ("s_per_step", "s/step", ".3f"), ("completions_per_s", "compl/s", ".1f"),
            ("peak_rss_mb", "peak RSS MB", ".0f"), ("gen_share", "gen share", ".2f"),
            ("mean_length", "mean len", ".1f"), ("speedup_vs_trl", "x vs TRL default", ".2f"),
            ("speedup_vs_trl_nogc", "x vs TRL no-GC", ".2f")]
    print(table(rows, cols))
    if args.scaling:
        print(f"2 processes vs 1 on the same global batch: {report['scaling']['speedup_2_over_1']:.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
