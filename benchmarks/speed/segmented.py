"""Segmented generation: what pruning at a prefix saves, in tokens and row-steps (`rollout_segmented`).

    python benchmarks/speed/segmented.py [--prefixes 4,8,16] [--group 8] [--max-new 32]

The tiny model of the tests (`build_tiny(seed=0)`), the two image prompts of
tests/rollout/test_segmented.py, temperature 1, seed 0. For each prefix P: keeping every row (the
plain rollout's counts, which it must equal) and keeping the even group positions. Counts only:
they are deterministic; wall time on a shared CPU is not (docs/explanation/segmented-generation.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script


def _samples():
    """The two image prompts of tests/rollout/test_segmented.py (different lengths: left padded)."""
    from PIL import Image

    from mmrlvr.types import Sample

    q = lambda t: ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]},)  # noqa: E731
    return [Sample("a", q("How many red shapes are there in this picture?"), 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),)),
            Sample("b", q("Hi"), 2, images=(Image.new("RGB", (112, 84), (30, 30, 200)),))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefixes", default="4,8,16")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from mmrlvr.config import RolloutConfig
    from mmrlvr.models.load import load_policy
    from mmrlvr.models.tiny import build_tiny
    from mmrlvr.rollout.hf import HFRolloutEngine

    with tempfile.TemporaryDirectory() as tmp:
        model, processor = load_policy(str(build_tiny(Path(tmp) / "tiny", seed=0)))
    engine = HFRolloutEngine(model, processor)
    rc = RolloutConfig(max_new_tokens=args.max_new, temperature=1.0)
    plain = engine.rollout(_samples(), args.group, rc, seed=0)
    print(f"plain rollout: {int(plain.completion_mask.sum())} tokens, {plain.completion_ids.numel()} row-steps")
    print("| prefix P | keep | kept | pruned still generating | tokens generated | row-steps | tokens_saved_max |")
    print("|---|---|---|---|---|---|---|")
    for p in (int(x) for x in args.prefixes.split(",")):
        for name, keep in (("all", lambda v: [True] * len(v.tokens)), ("even positions", lambda v: (v.group_position % 2 == 0).tolist())):
            c = engine.rollout_segmented(_samples(), args.group, rc, seed=0, prefix_tokens=p, keep=keep).counts
            print(f"| {p} | {name} | {c.kept} | {c.pruned_alive} | {c.tokens_generated} | {c.row_steps} | {c.tokens_saved_max} |")


if __name__ == "__main__":
    main()
