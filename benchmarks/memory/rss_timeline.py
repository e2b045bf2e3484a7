"""Where in a run mmrlvr's resident memory peaks: the mmrlvr arm of one vs_trl.py shape, its RSS
sampled every 2 ms, the loop's phases marked, and what autograd keeps in the first update.

    python benchmarks/memory/rss_timeline.py --shape video8_G8_tok16 --steps 4

Why: vs_trl.py reports one peak per process; to lower it one has to know in which phase it is
reached and whether it is what autograd keeps (activations) or the transient buffers and heap
around them. Each phase (policy preparation, the probe for unreachable parameters, every
rollout and update) gets the RSS at its start and the peak until the next mark. The first
update's saved tensors are counted per kind of module (distinct storages, bytes). One process,
one torch thread, from the shape's warm start (built once under --work, as vs_trl.py builds it).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.common import rss_mb  # noqa: E402

WRAPPED = ("prepare_policy", "freeze_unreachable", "collect")


class Timeline:
    """RSS samples (seconds, MB) on a thread, and named marks (seconds, name, MB)."""

    def __init__(self, interval: float = 0.002):
        self.t0 = time.perf_counter()
        self.samples: list[tuple[float, float]] = []
        self.marks: list[tuple[float, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self.t0, rss_mb()))
            time.sleep(interval)

    def mark(self, name: str) -> None:
        self.marks.append((time.perf_counter() - self.t0, name, rss_mb()))

    def phases(self) -> list[dict]:
        """One row per mark: the RSS at it and the peak until the next mark."""
        self._stop.set()
        self._thread.join()
        end = self.samples[-1][0] if self.samples else 0.0
        rows = []
        for i, (t, name, at) in enumerate(self.marks):
            until = self.marks[i + 1][0] if i + 1 < len(self.marks) else end
            seg = [r for s, r in self.samples if t <= s <= until]
            rows.append({"mark": name, "t_s": round(t, 3), "rss_mb": round(at, 1),
                         "peak_until_next_mb": round(max(seg + [at]), 1)})
        return rows


def kept_by_module(model, run) -> dict[str, float]:
    """MB of distinct storages autograd saves while `run()` executes, by the kind of module whose
    forward saved them ("V:" inside the vision tower, "L:" elsewhere; "other" outside both)."""
    where = ["other"]

    def enter(key):
        def hook(module, args) -> None:
            where.append(key)
        return hook

    def leave(module, args, output) -> None:  # returns None: the module's output is kept
        where.pop()

    handles = []
    for name, module in model.named_modules():
        kind = type(module).__name__
        if kind.endswith(("MLP", "Mlp", "Attention", "RMSNorm", "LayerNorm", "PatchEmbed", "PatchMerger")):
            key = ("V:" if "visual" in name or "vision" in name else "L:") + kind
            handles.append(module.register_forward_pre_hook(enter(key)))
            handles.append(module.register_forward_hook(leave))
    seen: set[int] = set()
    kept: dict[str, float] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            kept[where[-1]] = kept.get(where[-1], 0.0) + storage.nbytes() / 2**20
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run()
    finally:
        for h in handles:
            h.remove()
    return dict(sorted(kept.items(), key=lambda kv: -kv[1]))


def measure(shape_name: str, steps: int, work: Path, out_dir: Path) -> dict:
    import mmrlvr.recipe.loop as loop
    from benchmarks.speed.vs_trl import SHAPES, warm_for
    from benchmarks.speed.vs_trl_arms import load_bench_config

    shape = {**SHAPES[shape_name], "name": shape_name}
    warm = warm_for(work, shape["warm"])
    timeline = Timeline()
    saved = {name: getattr(loop, name) for name in WRAPPED}
    update = loop.Learner.update
    kept: dict[str, float] = {}

    def marked(name, fn):
        def call(*a, **k):
            timeline.mark(name + " start")
            try:
                return fn(*a, **k)
            finally:
                timeline.mark(name + " end")
        return call

    def first_counted(self, *a, **k):
        if kept:
            return update(self, *a, **k)
        result = []
        kept.update(kept_by_module(self.model, lambda: result.append(update(self, *a, **k))) or {"none": 0.0})
        return result[0]

    for name in WRAPPED:
        setattr(loop, name, marked(name, saved[name]))
    loop.Learner.update = marked("update", first_counted)
    try:
        loop.train(load_bench_config(shape, warm, steps, out_dir))
    finally:
        for name in WRAPPED:
            setattr(loop, name, saved[name])
        loop.Learner.update = update
    phases = timeline.phases()
    metrics = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]
    per_step = [{k: r.get(k) for k in ("step", "rollout/mixed_group_frac", "time/update")} for r in metrics if "time/step" in r]
    return {"shape": shape_name, "steps": steps, "phases": phases, "peak_mb": max(p["peak_until_next_mb"] for p in phases),
            "first_update_kept_mb": {k: round(v, 2) for k, v in kept.items()},
            "first_update_kept_total_mb": round(sum(kept.values()), 2), "per_step": per_step}


def main() -> int:
    from benchmarks.speed.vs_trl import SHAPES

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="video8_G8_tok16")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--work", default="runs/bench_vs_trl")
    ap.add_argument("--out", default="benchmarks/results/rss_timeline.json")
    args = ap.parse_args()
    if args.shape not in SHAPES:
        raise SystemExit(f"--shape: unknown shape {args.shape!r}; known: {', '.join(SHAPES)}")
    if args.steps < 1:
        raise SystemExit("--steps: at least 1")
    torch.set_num_threads(1)
    result = measure(args.shape, args.steps, Path(args.work), Path("runs/bench_rss_timeline") / args.shape)
    print("| mark | s | RSS MB at the mark | peak MB until the next |\n|---|---|---|---|")
    for p in result["phases"]:
        print(f"| {p['mark']} | {p['t_s']:.2f} | {p['rss_mb']:.1f} | {p['peak_until_next_mb']:.1f} |")
    print(f"\npeak {result['peak_mb']:.1f} MB; the first update kept {result['first_update_kept_total_mb']:.1f} MB for "
          "its backward: " + ", ".join(f"{k} {v:.1f}" for k, v in list(result["first_update_kept_mb"].items())[:6]))
    Path(args.out).write_text(json.dumps({"settings": vars(args), **result}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
