"""Synthetic chain of thought: "How many red shapes are on the board?" answered row by row.

A `grid` x `grid` board of 28 px cells (4 x 4 = 112 px: 16 merged visual tokens of a
Qwen2-VL-family model) holds shapes in three colours. The answer is a written chain before the
count, e.g.

    <think>Let me go through the board row by row. Row 1: red, blue. Row 2: nothing. Row 3: green.
    Row 4: red. Counting the red ones: 1, 2. So there are 2 red shapes.</think> <answer>2</answer>

(32-128 tokens with the tiny model's tokenizer), where only the colour words (and "nothing")
depend on the image; the openers and connectives are drawn from several phrasings, so most tokens
are high-entropy filler, and the counting is reasoning over what was listed. This is the setting
of the token-weighting papers (long reasoning, few perception tokens), which the 8-token answers
of marked_cell and grounding_tiny cannot show.

The warm-start teacher is flawed on purpose: with probability `flaw_prob` it misreads the target
colour in the bottom row as another colour, and then counts consistently with what it listed,
so its answer is wrong exactly when the bottom row holds a target shape. Fixing that needs the
perception tokens of the last row; the `count` verifier scores only the final number.
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from mmrlvr.data.prompts import prompt_spec, task_messages
from mmrlvr.data.synthetic import draw_cell_shapes, seeded_items
from mmrlvr.types import Sample

MEDIA = ("image",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('count',)  # what its samples are scored by (each sample's own verifier)

COLORS = {"red": (220, 40, 40), "blue": (40, 80, 220), "green": (40, 170, 60)}
NAMES = tuple(COLORS)
SHAPES = ("circle", "square", "triangle")
CELL = 28
OPENERS = (
    "Let me go through the board row by row.", "I will look at each row in turn.",
    "First I list what each row holds.", "Reading the board from top to bottom.",
)
ROW_JOIN = ("Row {r}: {items}.", "In row {r} I see {items}.", "Row {r} has {items}.")
COUNT_INTRO = ("Counting the {c} ones:", "Now I count the {c} shapes:", "Tallying {c}:")
CLOSERS = ("So there are {n} {c} shapes.", "That makes {n} in total.", "The count is {n}.")

ANSWER_FORMAT = "End with <answer>number</answer>."


def _layout(rng: random.Random, grid: int, min_shapes: int, max_shapes: int) -> tuple:
    n = rng.randint(min_shapes, max_shapes)
    cells = sorted(rng.sample(range(grid * grid), n))
    return tuple((cell, rng.choice(NAMES), rng.choice(SHAPES)) for cell in cells), rng.choice(NAMES)


def _draw(grid: int, shapes: tuple, rng: random.Random) -> Image.Image:
    img = Image.new("RGB", (grid * CELL, grid * CELL), (235, 235, 235))
    draw_cell_shapes(ImageDraw.Draw(img), shapes, grid, COLORS, rng, sizes=(14, 20), margin=3, cell=CELL)
    return img


def chain(shapes: tuple, grid: int, target: str, rng: random.Random, misread_last_row: bool = False) -> tuple[str, int]:
    """The written reasoning and the count it arrives at. `misread_last_row`: the target colour in
    the bottom row is reported as another colour (the flawed teacher's perception error)."""
    rows: list[list[str]] = [[] for _ in range(grid)]
    for cell, color, _ in shapes:
        r = cell // grid
        if misread_last_row and r == grid - 1 and color == target:
            color = NAMES[(NAMES.index(color) + 1) % len(NAMES)]
        rows[r].append(color)
    parts = [rng.choice(OPENERS)]
    for r, items in enumerate(rows, 1):
        parts.append(rng.choice(ROW_JOIN).format(r=r, items=", ".join(items) if items else "nothing"))
    n = sum(items.count(target) for items in rows)
    tally = ", ".join(str(i) for i in range(1, n + 1)) or "none"
    parts.append(f"{rng.choice(COUNT_INTRO).format(c=target)} {tally}.")
    parts.append(rng.choice(CLOSERS).format(n=n, c=target))
    return f"<think>{' '.join(parts)}</think> <answer>{n}</answer>", n


def build(split: str, size: int, seed: int, grid: int = 4, min_shapes: int = 3, max_shapes: int = 6,
          flaw_prob: float = 0.7, eval_size: int = 256, prompt_template: str | None = None,
          system_prompt: str | None = None) -> list[Sample]:
    """Samples for "train" or "eval"; eval boards are drawn first and excluded from train."""
    if not 2 <= grid <= 8 or not 1 <= min_shapes <= max_shapes <= grid * grid or not 0 <= flaw_prob <= 1:
        raise ValueError(f"cell_tally: need 2 <= grid <= 8, 1 <= min_shapes <= max_shapes <= grid^2 and "
                         f"0 <= flaw_prob <= 1; got grid={grid}, min_shapes={min_shapes}, max_shapes={max_shapes}, "
                         f"flaw_prob={flaw_prob}")
    spec = prompt_spec("answer", prompt_template, system_prompt)  # validate before drawing
    layouts, rng = seeded_items("cell_tally", split, size, seed,
                                lambda r: _layout(r, grid, min_shapes, max_shapes), eval_size=eval_size)
    samples = []
    for i, (shapes, target) in enumerate(layouts):
        truth = sum(color == target for _, color, _ in shapes)
        target_text, _ = chain(shapes, grid, target, rng, misread_last_row=rng.random() < flaw_prob)
        ask = f"How many {target} shapes are on the board? Go through the rows, then count."
        fields = {"question": ask, "answer_format": ANSWER_FORMAT, "color": target, "grid": grid}
        default = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"{ask} {ANSWER_FORMAT}"}]},)
        samples.append(Sample(
            id=f"cell_tally-{split}-{seed}-{i}",
            messages=task_messages(spec, default, fields),
            reference=truth,
            verifier="count",
            images=(_draw(grid, shapes, rng),),
            meta={"target": target, "n_shapes": len(shapes), "colors": [color for _, color, _ in shapes]},
            target=target_text,
        ))
    return samples
