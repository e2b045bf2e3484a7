"""Synthetic perception: "What colour is the shape in the black frame?" on a crowded board.

A `grid` x `grid` board of 28x28 cells (6 x 6 = 168 px by default: 36 merged visual tokens of a
Qwen2-VL-family model) holds many shapes in six colours, some of them close (red, orange,
yellow). One occupied cell has a black frame; `decoys` others have grey frames. The answer is a
colour name, scored by the `choice` verifier against the colour list in `meta.options`.

Unlike counting, nothing in the text narrows the answer: the model must find the one black
frame among grey ones and read the colour inside it, so what RL can improve is what the model
sees. The warm-start teacher is right; a short warm start leaves the perception half learnt.
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from mmrlvr.data.prompts import prompt_spec, task_messages
from mmrlvr.data.synthetic import draw_cell_shapes
from mmrlvr.types import Sample

MEDIA = ("image",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('choice',)  # what its samples are scored by (each sample's own verifier)

COLORS = {
    "red": (220, 40, 40), "orange": (240, 140, 30), "yellow": (230, 200, 30),
    "green": (40, 170, 60), "blue": (40, 80, 220), "purple": (150, 60, 190),
}
NAMES = tuple(COLORS)
SHAPES = ("circle", "square", "triangle")
CELL = 28
ASK, ANSWER_FORMAT = "What colour is the shape in the black frame?", "Answer as <answer>colour</answer>."
QUESTION = f"{ASK} {ANSWER_FORMAT}"
FIELDS = {"question": ASK, "answer_format": ANSWER_FORMAT, "options": list(NAMES)}  # what a prompt_template sees


def _draw(grid: int, layout: tuple, rng: random.Random) -> Image.Image:
    shapes, marked, decoys = layout
    img = Image.new("RGB", (grid * CELL, grid * CELL), (235, 235, 235))
    draw = ImageDraw.Draw(img)
    draw_cell_shapes(draw, shapes, grid, COLORS, rng, sizes=(12, 18), margin=4, cell=CELL)
    for cell, outline in [(marked, (0, 0, 0))] + [(d, (150, 150, 150)) for d in decoys]:
        r, c = divmod(cell, grid)
        draw.rectangle((c * CELL, r * CELL, c * CELL + CELL - 1, r * CELL + CELL - 1), outline=outline, width=2)
    return img


def _layout(rng: random.Random, grid: int, min_shapes: int, max_shapes: int, decoys: int) -> tuple:
    n = rng.randint(min_shapes, max_shapes)
    cells = rng.sample(range(grid * grid), n)
    shapes = tuple((cell, rng.choice(NAMES), rng.choice(SHAPES)) for cell in cells)
    marked, *others = rng.sample(cells, 1 + min(decoys, n - 1))
    return shapes, marked, tuple(others)


def build(
    split: str, size: int, seed: int, grid: int = 6, min_shapes: int = 10, max_shapes: int = 20,
    decoys: int = 3, eval_size: int = 256, prompt_template: str | None = None, system_prompt: str | None = None,
) -> list[Sample]:
    """Samples for "train" or "eval"; eval boards are drawn first and excluded from train."""
    if not 2 <= grid <= 16 or not 1 <= min_shapes <= max_shapes <= grid * grid or decoys < 0:
        raise ValueError(
            f"marked_cell: need 2 <= grid <= 16, 1 <= min_shapes <= max_shapes <= grid^2 and decoys >= 0; "
            f"got grid={grid}, min_shapes={min_shapes}, max_shapes={max_shapes}, decoys={decoys}"
        )
    spec = prompt_spec("answer", prompt_template, system_prompt)  # validate before drawing
    messages = task_messages(spec, ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]},), FIELDS)
    eval_rng = random.Random(f"marked-cell-eval-{seed}")
    n_eval = eval_size if split == "train" else size
    eval_layouts = [_layout(eval_rng, grid, min_shapes, max_shapes, decoys) for _ in range(n_eval)]
    if split == "eval":
        layouts, rng = eval_layouts, eval_rng
    elif split == "train":
        rng, seen, layouts = random.Random(f"marked-cell-train-{seed}"), set(eval_layouts), []
        while len(layouts) < size:
            lay = _layout(rng, grid, min_shapes, max_shapes, decoys)
            if lay not in seen:
                layouts.append(lay)
    else:
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    samples = []
    for i, lay in enumerate(layouts):
        shapes, marked, _ = lay
        color = next(col for cell, col, _ in shapes if cell == marked)
        samples.append(
            Sample(
                id=f"marked_cell-{split}-{seed}-{i}",
                messages=messages,
                reference="ABCDEF"[NAMES.index(color)],
                verifier="choice",
                images=(_draw(grid, lay, rng),),
                meta={"options": list(NAMES), "color": color, "marked": marked, "n_shapes": len(shapes)},
                target=f"<answer>{color}</answer>",
            )
        )
    return samples
