"""mmrlvr.run from Python, the way a TRL user works: an in-memory dataset and reward callables.

Run: `python examples/api_quickstart.py [output_dir]` (about 20 s on a 2-core CPU; CI runs it).
The tiny embedded model only shows the data path working end to end; it does not learn to read
these pictures in a few steps (see "What the tiny model cannot learn" in docs/tutorials/first-gpu-model.md).
"""

from __future__ import annotations

import sys

from PIL import Image, ImageDraw

import mmrlvr
from mmrlvr.types import Verdict


def picture(n: int) -> Image.Image:
    """`n` red dots on a 112x112 canvas."""
    img = Image.new("RGB", (112, 112), "white")
    draw = ImageDraw.Draw(img)
    for k in range(n):
        x, y = 14 + 28 * (k % 3), 14 + 28 * (k // 3)
        draw.ellipse([x - 8, y - 8, x + 8, y + 8], fill="red")
    return img


# rows in your own field names: `prompt`-style text, a reference, and an extra column (`level`)
# that reaches the reward functions in sample.meta["columns"]
rows = [{"picture": picture(n), "ask": "How many red dots are there?", "count": str(n), "level": n % 2}
        for n in range(1, 7) for _ in range(2)]


def shorter_is_better(completion: str, sample) -> float:
    """A plain function: 1 for a short answer, less for a long one."""
    return 1.0 if len(completion) <= 20 else 0.5


def main(output_dir: str = "runs/api_quickstart") -> dict:
    weight = 0.5  # a closure over a local, as a notebook cell would write it
    rewards = [
        shorter_is_better,
        lambda completion, sample: Verdict(weight * (sample.reference in completion), "reference seen",
                                           {"level": float(sample.meta["columns"]["level"])}),
    ]
    return mmrlvr.run(
        {
            "output_dir": output_dir,
            "task": {"name": "geometry", "train_size": 10, "eval_size": 2,
                     "args": {"columns": {"image": "picture", "question": "ask", "answer": "count"},
                              "holdout_frac": 0.2}},
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 6},
            "train": {"steps": 2, "log_every": 1, "save_every": 0, "log_with": []},
            "eval": {"batch_size": 4},
        },
        train_data=rows,
        rewards=rewards,
        overrides=["seed=1"],
    )


if __name__ == "__main__":
    summary = main(*sys.argv[1:])
    print({k: summary[k] for k in ("steps", "reward_first", "reward_last", "run_dir")})
