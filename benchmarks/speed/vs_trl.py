"""mmrlvr against TRL's GRPOTrainer (and a bare transformers loop) on shapes that do the work.

    pip install -e ".[bench]"
    python benchmarks/speed/vs_trl.py --repeats 3 --steps 8

Contenders, each its own process, from the same warm-started checkpoint, one CPU thread
(`vs_trl_arms.py`):
  mmrlvr       the loop of `mmrlvr train` (no gradient checkpointing: mmrlvr leaves it off)
  trl          TRL 1.16 `GRPOConfig` as configured by default: gradient_checkpointing=True
  trl_nogc     the same with gradient_checkpointing=False: equal settings to mmrlvr
  bare         `generate` + one teacher-forced forward/backward in plain transformers (video rows:
               TRL 1.16's GRPOTrainer cannot train on video: `_tokenize_prompts` collects only
               "image" parts and `_get_per_token_logps_and_entropies` takes no
               `pixel_values_videos`/`video_grid_thw`, so its training forward has no video)
All sample G completions per prompt (8 prompts per step unless a shape says otherwise), same
learning rate and loss (token-mean PPO-clip, clip 0.2, one update per step, no KL), the same
task, prompts, media and verifier (the TRL reward function calls mmrlvr's verifier).
Each shape starts from a warm start trained on its own task at its own resolution / frame count
(built once under --work), so groups are mixed and the update runs; `mixed` in the table is the
share of groups with mixed rewards. The first step of each run is a warm-up and not counted.
`--scaling` adds mmrlvr under `torchrun` with 2 gloo processes vs 1 on the same global batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.speed.vs_trl_arms import LR, child_bare, child_floor, child_mmrlvr, child_trl, prompts  # noqa: E402

VOCAB = 151_936
IMG = {"config": "configs/quickstart.yaml", "group": 8, "max_new": 32, "px": 112, "warm": "."}
VIDEO = {"config": "configs/video_motion_tiny.yaml", "group": 8, "max_new": 16, "arms": ("mmrlvr", "bare")}
# name -> shape; "steps"/"repeats" cap the command line's for shapes too costly to repeat
SHAPES = {  # in the order they run: the newest rows first, so a cut-short run keeps them
    "G8_tok32_px112": IMG,
    "cot_G8_tok128_px112": {"config": "configs/cell_tally_tiny.yaml", "group": 8, "max_new": 128, "px": 112,
                            "warm": "warm_cell_tally", "repeats": 2},
    "G8_tok32_px448": {**IMG, "px": 448, "warm": "warm_px448", "steps": 3, "repeats": 2},
    "video8_G8_tok16": {**VIDEO, "overrides": ["task.args.frames=8"], "warm": "warm_video8"},
    "video16_G8_tok16": {**VIDEO, "overrides": ["task.args.frames=16"], "warm": "warm_video16"},
    # the base shape with Qwen's 151,936-entry vocabulary (embedding and output layer widened);
    # 2 prompts x 8 (as memory_step.py): 16 rows of 151,936-wide logits per update
    "vocab151k_P2_G8_tok32_px112": {**IMG, "warm": "warm_vocab151k", "prompts": 2, "steps": 3, "repeats": 2},
    # Qwen2.5-VL's typical budget: 1024 visual tokens per image (896 x 896 px), warm start at 448
    # px; 2 prompts x 8 so that TRL encoding every completion's image fits the time
    "P2_G8_tok32_px896": {**IMG, "px": 896, "warm": "warm_px448", "prompts": 2, "steps": 3, "repeats": 1},
    "G4_tok32_px112": {**IMG, "group": 4},
    "G16_tok32_px112": {**IMG, "group": 16},
}
WARM = {  # warm start name -> (config, overrides)
    ".": ("configs/quickstart.yaml", ()),
    "warm_cell_tally": ("configs/cell_tally_tiny.yaml", ()),
    "warm_px448": ("configs/quickstart.yaml", ("model.min_pixels=200704", "model.max_pixels=200704")),
    "warm_video8": ("configs/video_motion_tiny.yaml", ("task.args.frames=8",)),
    "warm_video16": ("configs/video_motion_tiny.yaml", ("task.args.frames=16",)),
}
TRL_ARMS = ("mmrlvr", "trl", "trl_nogc")


def warm_for(work: Path, name: str) -> Path:
    """The shape's warm start, built once under `work` (the vocabulary one from the base one)."""
    from benchmarks.common import warm_start_dir

    if name == "warm_vocab151k":
        return widen_vocab(warm_for(work, "."), work / name)
    config, overrides = WARM[name]
    return warm_start_dir(work / name if name != "." else work, config=config, overrides=overrides)


def widen_vocab(src: Path, dst: Path) -> Path:
    """The warm start with embedding and output layer widened to VOCAB rows. The new output rows
    copy the row of the token the policy finds least likely on a real prompt, so they are never
    sampled (the tokenizer cannot decode them) and the policy's choices stay those of `src`."""
    if (dst / "config.json").exists():
        return dst
    import torch

    from mmrlvr.data.collate import encode_prompts
    from mmrlvr.models.load import load_policy
    from mmrlvr.tasks import load_task

    model, processor = load_policy(str(src))
    inputs = {k: v for k, v in encode_prompts(processor, load_task("counting", "train", 4, 0)).items() if not k.startswith("_")}
    with torch.no_grad():
        worst = int(model(**inputs).logits[:, -1].mean(0).argmin())
    old = model.get_output_embeddings().weight.shape[0]
    model.resize_token_embeddings(VOCAB)
    with torch.no_grad():
        for layer in {id(m): m for m in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
            layer.weight[old:] = layer.weight[worst]
    model.save_pretrained(dst)
    processor.save_pretrained(dst)
    return dst


def _arms(shape: dict) -> tuple[str, ...]:
    return shape.get("arms", TRL_ARMS)


def _profiled(fw: str, warm: Path, shape: dict, steps: int, out: Path) -> dict:
    """The run under torch.profiler: the top operators by self CPU time, and how much of the
    run's wall time the operators account for (the rest is Python: not the model's time)."""
    import time

    import torch

    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        result = _child(fw, warm, shape, steps, out)
    wall = time.perf_counter() - t0
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    ops = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:15]
    result["profile"] = {"wall_s": wall, "op_self_s": total,
                         "top_ops": [[e.key, e.self_cpu_time_total / 1e6, e.count] for e in ops]}
    return result


def _child(fw: str, warm: Path, shape: dict, steps: int, out: Path) -> dict:
    if fw == "mmrlvr":
        return child_mmrlvr(warm, shape, steps, out)
    if fw == "bare":
        return child_bare(warm, shape, steps, out)
    if fw == "floor":
        return child_floor(warm, shape, steps, out)
    return child_trl(warm, shape, steps, out, None if fw == "trl" else False)


# ------------------------------------------------------------------------------------------ parent
def _run_child(fw: str, warm: Path, shape: dict, steps: int, out_dir: Path, procs: int = 1,
               profile: bool = False) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = [__file__, "--child", fw, "--warm", str(warm), "--shape", json.dumps(shape),
            "--steps", str(steps), "--child-out", str(out_dir), *(["--profile"] if profile else [])]
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
    """Medians over every measured step of every repeat; spread = (min, max) of the repeats' medians."""
    def per_step(key):
        return [x for r in runs for x in r[key][1:]]

    med = statistics.median(per_step("step_s"))
    per_run = [statistics.median(r["step_s"][1:]) for r in runs]
    gen, tokens = statistics.median(per_step("gen_s")), statistics.median(per_step("gen_tokens"))
    n = prompts(shape) * shape["group"]
    return {
        "framework": fw, "shape": shape["name"], "group": shape["group"], "max_new": shape["max_new"],
        "procs": runs[0]["world"], "s_per_step": med, "spread": [min(per_run), max(per_run)],
        "repeats": len(runs), "steps": len(runs[0]["step_s"]) - 1,
        "gen_s": gen, "logprob_s": statistics.median(per_step("logprob_s")),
        "update_s": statistics.median(per_step("update_s")),
        "completions_per_s": n / med, "gen_tokens_per_s": tokens / max(gen, 1e-9),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "mean_length": statistics.mean(per_step("mean_length") or runs[0]["mean_length"]),
        # decoding steps the sampler ran: the longest completion of each step, averaged
        "max_length": statistics.mean(per_step("max_length") or runs[0].get("max_length") or [float("nan")]),
        # generation cost per decoding step: the same work on both sides whatever lengths were drawn
        "gen_ms_per_decode_step": statistics.median(
            [1000 * g / max(m, 1) for g, m in zip(per_step("gen_s"), per_step("max_length"))] or [float("nan")]),
        "mixed": statistics.mean(per_step("mixed") or runs[0]["mixed"]),
        "reward": statistics.mean(per_step("reward") or runs[0]["reward"]),
    }


def rss_above_floor(mine: float, other: float, floor: float) -> float:
    """Peak RSS above what every arm holds before its first step (imports, model, one batch):
    the memory each framework's own code adds, as a ratio."""
    return (mine - floor) / max(other - floor, 1e-9)


COLS = [("shape", "shape", ""), ("framework", "framework", ""), ("s_per_step", "s/step", ".3f"),
        ("gen_s", "gen s", ".3f"), ("logprob_s", "logp s", ".3f"), ("update_s", "update s", ".3f"),
        ("completions_per_s", "compl/s", ".1f"), ("gen_tokens_per_s", "gen tok/s", ".0f"),
        ("peak_rss_mb", "peak RSS MB", ".0f"), ("mean_length", "mean len", ".1f"), ("max_length", "max len", ".1f"),
        ("mixed", "mixed", ".2f"),
        ("speedup_vs_trl_nogc", "x vs TRL no-GC", ".2f"), ("rss_vs_trl_nogc", "RSS/no-GC", ".2f"),
        ("speedup_vs_trl", "x vs TRL GC", ".2f"), ("speedup_vs_bare", "x vs bare", ".2f")]


def markdown(report: dict) -> str:
    """The README tables. First the headline: per shape mmrlvr's speed-up and memory ratio at
    equal settings (TRL without checkpointing, or the bare loop for video), then TRL's default;
    then every arm's seconds by phase, throughput and memory. spread = the repeats' medians."""
    head = ("| shape | mmrlvr s/step | equal settings: TRL no-GC (or bare) s/step | **speed-up** | **peak RSS ratio** "
            "| floor MB | RSS above the floor, ratio | TRL default (GC) s/step | speed-up vs default "
            "| mixed groups mmrlvr / other | runs x steps |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, res in report["results"].items():
        m = res["mmrlvr"]
        ref = "trl_nogc" if "trl_nogc" in res else "bare"
        d = res.get("trl")
        default = (f"{d['s_per_step']:.3f}", f"{m['speedup_vs_trl']:.2f}x") if d else ("-", "-")
        floor = (f"{m['floor_rss_mb']:.0f}", f"{m[f'rss_above_floor_vs_{ref}']:.2f}") if "floor_rss_mb" in m else ("-", "-")
        lines.append(
            f"| {name} | {m['s_per_step']:.3f} | {res[ref]['s_per_step']:.3f} ({ref}) | **{m[f'speedup_vs_{ref}']:.2f}x** "
            f"| **{m[f'rss_vs_{ref}']:.2f}** | {floor[0]} | {floor[1]} | {default[0]} | {default[1]} "
            f"| {m['mixed']:.2f} / {res[ref]['mixed']:.2f} | {m['repeats']} x {m['steps']} |")
    head = ("| shape | arm | s/step (spread) | gen s | logp s | update s | compl/s | gen tok/s | peak RSS MB "
            "| mean len | max len | gen ms / decoding step | mixed | runs x steps |")
    lines += ["", head, "|" + "---|" * (head.count("|") - 1)]
    for name, res in report["results"].items():
        for fw in [f for f in ("mmrlvr", "trl_nogc", "trl", "bare") if f in res]:
            x = res[fw]
            lines.append(
                f"| {name} | {fw} | {x['s_per_step']:.3f} ({x['spread'][0]:.3f}-{x['spread'][1]:.3f}) | {x['gen_s']:.3f} "
                f"| {x['logprob_s']:.3f} | {x['update_s']:.3f} | {x['completions_per_s']:.1f} | {x['gen_tokens_per_s']:.0f} "
                f"| {x['peak_rss_mb']:.0f} | {x['mean_length']:.1f} | {x.get('max_length', float('nan')):.1f} "
                f"| {x.get('gen_ms_per_decode_step', float('nan')):.1f} | {x['mixed']:.2f} "
                f"| {x['repeats']} x {x['steps']} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per run (after 1 warm-up step)")
    ap.add_argument("--shapes", default="all",
                    help="'all', 'none' (with --scaling: only the 2-vs-1 process row) or a comma list of: "
                         + ", ".join(SHAPES))
    ap.add_argument("--scaling", action="store_true", help="add mmrlvr 2 processes vs 1 (gloo DDP)")
    ap.add_argument("--warm-only", action="store_true", help="build the chosen shapes' warm starts and stop")
    ap.add_argument("--work", default="runs/bench_vs_trl")
    ap.add_argument("--out", default="benchmarks/results/vs_trl.json")
    ap.add_argument("--profile", action="store_true",
                    help="run every contender under torch.profiler and keep its top operators (slower)")
    ap.add_argument("--markdown", help="print the README table of a results JSON and stop")
    ap.add_argument("--child")
    ap.add_argument("--warm")
    ap.add_argument("--shape")
    ap.add_argument("--child-out")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    if args.child:
        import torch
        from benchmarks.common import peak_rss_mb

        torch.set_num_threads(1)
        out = Path(args.child_out)
        out.mkdir(parents=True, exist_ok=True)
        if args.profile:
            result = _profiled(args.child, Path(args.warm), json.loads(args.shape), args.steps, out)
        else:
            result = _child(args.child, Path(args.warm), json.loads(args.shape), args.steps, out)
        result["peak_rss_mb"] = peak_rss_mb()
        (out / f"result_rank{int(os.environ.get('RANK', 0))}.json").write_text(json.dumps(result))
        return 0

    import torch
    import transformers
    import trl
    from benchmarks.common import table

    torch.set_num_threads(1)
    work = Path(args.work)
    names = {"all": list(SHAPES), "none": []}.get(args.shapes) or args.shapes.split(",")
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"--shapes: unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    warms = {n: warm_for(work, SHAPES[n]["warm"]) for n in names}
    if args.warm_only:
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {"settings": {"lr": LR, "measured_steps": args.steps, "warmup_steps": 1, "repeats": args.repeats,
                           "threads": 1, "device": "cpu", "commit": commit, "command": " ".join(sys.argv),
                           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                        "trl": trl.__version__}},
              "results": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        shape = {**SHAPES[name], "name": name}
        steps = min(args.steps, shape.get("steps", args.steps)) + 1
        repeats = min(args.repeats, shape.get("repeats", args.repeats))
        runs: dict = {fw: [] for fw in _arms(shape)}
        for rep in range(repeats):
            for fw in _arms(shape):  # A B C A B C
                r = _run_child(fw, warms[name], shape, steps, work / f"{name}_{fw}_{rep}", profile=args.profile)
                runs[fw].append(r)
                print(f"{name} {fw} run {rep}: median {statistics.median(r['step_s'][1:]):.2f} s/step "
                      f"(gen {statistics.median(r['gen_s'][1:]):.2f}), mixed {statistics.mean(r['mixed']):.2f}", flush=True)
        per = {fw: _summarise(fw, shape, rs) for fw, rs in runs.items()}
        floor = _run_child("floor", warms[name], shape, steps, work / f"{name}_floor")["peak_rss_mb"]
        for ref in [fw for fw in per if fw != "mmrlvr"]:
            per["mmrlvr"][f"speedup_vs_{ref}"] = per[ref]["s_per_step"] / per["mmrlvr"]["s_per_step"]
            per["mmrlvr"][f"rss_vs_{ref}"] = per["mmrlvr"]["peak_rss_mb"] / per[ref]["peak_rss_mb"]
            per["mmrlvr"][f"rss_above_floor_vs_{ref}"] = rss_above_floor(per["mmrlvr"]["peak_rss_mb"],
                                                                          per[ref]["peak_rss_mb"], floor)
        per["mmrlvr"]["floor_rss_mb"] = floor
        rows += list(per.values())
        report["results"][name] = {"shape": shape, **per, "raw": runs}
        out.write_text(json.dumps(report, indent=1))  # every finished shape is kept
    if args.scaling:
        base = {**IMG, "name": "G8_tok32_px112"}
        one = _run_child("mmrlvr", warm_for(work, "."), base, args.steps + 1, work / "scaling_1proc")
        two = _run_child("mmrlvr", warm_for(work, "."), base, args.steps + 1, work / "scaling_2proc", procs=2)
        scale = {"1proc": _summarise("mmrlvr", base, [one]), "2proc": _summarise("mmrlvr", base, [two])}
        scale["speedup_2_over_1"] = scale["1proc"]["s_per_step"] / scale["2proc"]["s_per_step"]
        scale["2proc"]["peak_rss_mb_per_proc"] = two["peak_rss_mb_per_proc"]
        report["scaling"] = scale
        rows += [{**scale["1proc"], "framework": "mmrlvr 1 proc"}, {**scale["2proc"], "framework": "mmrlvr 2 procs"}]
    print(table(rows, COLS))
    if args.scaling:
        print(f"2 processes vs 1 on the same global batch: {report['scaling']['speedup_2_over_1']:.2f}x")
    out.write_text(json.dumps(report, indent=1))
    print(markdown(report))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
