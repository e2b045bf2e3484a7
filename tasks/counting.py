"""Synthetic counting: "How many red shapes?" over a 4x4 board of coloured shapes.

Images are 112x112 with one shape per occupied 28x28 cell, so each cell is one merged visual
token of a Qwen2-VL-family model (patch 14, merge 2): the task is learnable by a tiny model.

The teacher used for the supervised warm start is deliberately flawed, as real teachers are: on
boards with `flaw_min` or more red shapes it answers one too many with probability `flaw_prob`.
A model imitating it learns the over-count as its most likely answer; RL against the exact
verifier rewards the correct count that it still samples sometimes, and corrects the flaw.
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from mmrlvr.data.prompts import prompt_spec, task_messages
from mmrlvr.data.synthetic import draw_cell_shapes
from mmrlvr.types import Sample

MEDIA = ("image",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('count',)  # what its samples are scored by (each sample's own verifier)

COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 30)}
SHAPES = ("circle", "square", "triangle")
GRID, CELL = 4, 28
ASK, ANSWER_FORMAT = "How many red shapes are in the image?", "Answer as <answer>N</answer>."
QUESTION = f"{ASK} {ANSWER_FORMAT}"
FIELDS = {"question": ASK, "answer_format": ANSWER_FORMAT, "color": "red"}  # what a prompt_template sees


def _draw(cells: list[tuple[int, str, str]], rng: random.Random) -> Image.Image:
    img = Image.new("RGB", (GRID * CELL, GRID * CELL), (235, 235, 235))
    draw = ImageDraw.Draw(img)
    draw_cell_shapes(draw, cells, GRID, COLORS, rng, sizes=(14, 22), margin=1, cell=CELL)
    return img


def _layout(rng: random.Random, max_red: int, max_total: int) -> tuple:
    n_red = rng.randint(0, max_red)
    n_other = rng.randint(0, max_total - n_red)
    cells = rng.sample(range(GRID * GRID), n_red + n_other)
    colors = ["red"] * n_red + [rng.choice(["green", "blue", "yellow"]) for _ in range(n_other)]
    return tuple((cell, color, rng.choice(SHAPES)) for cell, color in zip(cells, colors))


def _teacher(n_red: int, rng: random.Random, flaw_min: int, flaw_prob: float) -> int:
    return n_red + 1 if n_red >= flaw_min and rng.random() < flaw_prob else n_red


def build(
    split: str, size: int, seed: int, max_red: int = 5, max_total: int = 9,
    flaw_min: int = 3, flaw_prob: float = 0.7, eval_size: int = 256, prompt_template: str | None = None,
    system_prompt: str | None = None,
) -> list[Sample]:
    """Samples for "train" or "eval"; eval layouts are drawn first and excluded from train.

    The train split excludes the first `eval_size` held-out boards; the eval split returns the
    first `size`. The loop sets `eval_size` from `task.eval_size` (`mmrlvr.train.setup.task_args`)
    so both are one number.
    """
    spec = prompt_spec("answer", prompt_template, system_prompt)  # validate before drawing
    messages = task_messages(spec, ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]},), FIELDS)
    eval_rng = random.Random(f"counting-eval-{seed}")
    eval_layouts = [_layout(eval_rng, max_red, max_total) for _ in range(eval_size if split == "train" else size)]
    if split == "eval":
        layouts, rng = eval_layouts, eval_rng
    elif split == "train":
        rng, seen, layouts = random.Random(f"counting-train-{seed}"), set(map(frozenset, eval_layouts)), []
        while len(layouts) < size:
            lay = _layout(rng, max_red, max_total)
            if frozenset(lay) not in seen:
                layouts.append(lay)
    else:
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    samples = []
    for i, lay in enumerate(layouts):
        n_red = sum(1 for _, color, _ in lay if color == "red")
        teacher = _teacher(n_red, rng, flaw_min, flaw_prob)
        samples.append(
            Sample(
                id=f"counting-{split}-{seed}-{i}",
                messages=messages,
                reference=n_red,
                verifier="count",
                images=(_draw(list(lay), rng),),
                meta={"teacher": teacher, "n_shapes": len(lay), "board": sorted(lay)},
                target=f"<answer>{teacher}</answer>",
            )
        )
    return samples
