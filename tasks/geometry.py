"""geometry: diagram questions, multiple choice (`choice` verifier) or free form (`math`).

Real data (`data:` set): MATH-V JSONL (`question` with `<image1>`, `options`, `answer` a letter or
a value, `image` a relative path) and Geometry3K as packaged for EasyR1/verl (Parquet: `images` a
list of image dicts, `problem` with `<image>`, `answer`). Rows with options are scored by
`choice` (options in `meta.options`, listed in the prompt as "(A) ..."), the others by `math`.

Synthetic (no `data:`): one filled polygon with 3, 4, 5 or 6 sides on a 112x112 image, asked
either as multiple choice ("(A) 3 (B) 4 (C) 5 (D) 6") or free form ("how many sides?"). The
supervised warm start imitates a flawed teacher that calls a hexagon a pentagon `flaw_prob` of
the time; RL against the verifiers rewards the right count that the policy still samples.
"""

from __future__ import annotations

import math
import random

from PIL import Image, ImageDraw

from mmrlvr.data.prompts import build_messages, instruction
from mmrlvr.data.qa import LETTERS, load_real, options_text, qa_sample
from mmrlvr.data.synthetic import png_bytes, seeded_items
from mmrlvr.types import Sample

COLUMNS = {
    "image": ["image", "images", "image_path", "imgname"],
    "question": ["question", "problem", "query"],
    "answer": ["answer", "label"],
    "options": ["options", "choices"],
    "id": ["id", "pid", "question_id"],
}
SIDES = (3, 4, 5, 6)
SIZE = 112
COLORS = ((220, 40, 40), (40, 170, 60), (40, 80, 220), (230, 160, 30), (140, 60, 200))


# --- synthetic ------------------------------------------------------------------------------

def _polygon(rng: random.Random) -> tuple:
    n = rng.choice(SIDES)
    radius = rng.randint(34, 50)
    cx, cy = rng.randint(radius + 2, SIZE - radius - 2), rng.randint(radius + 2, SIZE - radius - 2)
    rot = rng.randint(0, 359)
    color = rng.randrange(len(COLORS))
    form = rng.choice(("choice", "free"))
    return n, radius, cx, cy, rot, color, form


def _draw(n: int, radius: int, cx: int, cy: int, rot: int, color: int) -> Image.Image:
    img = Image.new("RGB", (SIZE, SIZE), (240, 240, 240))
    pts = [(cx + radius * math.cos(math.radians(rot + 360 * k / n)),
            cy + radius * math.sin(math.radians(rot + 360 * k / n))) for k in range(n)]
    ImageDraw.Draw(img).polygon(pts, fill=COLORS[color])
    return img


def _teacher(n: int, rng: random.Random, flaw_prob: float) -> int:
    return 5 if n == 6 and rng.random() < flaw_prob else n


def synthetic(split: str, size: int, seed: int, template: str, flaw_prob: float, eval_size: int) -> list[Sample]:
    items, rng = seeded_items("geometry", split, size, seed, _polygon, eval_size, key=lambda it: it[:6])
    options = [str(n) for n in SIDES]
    samples = []
    for i, (n, radius, cx, cy, rot, color, form) in enumerate(items):
        said = _teacher(n, rng, flaw_prob)
        suffix = instruction(template)
        if form == "choice":
            reference, verifier, answer = LETTERS[SIDES.index(n)], "choice", LETTERS[SIDES.index(said)]
            suffix = options_text(options) + "\n" + suffix
            question = "How many sides does the polygon have?"
        else:
            reference, verifier, answer = str(n), "math", str(said)
            question = "How many sides does the polygon have? Answer with a number."
        messages, images = build_messages(question, [png_bytes(_draw(n, radius, cx, cy, rot, color))], suffix)
        samples.append(Sample(
            id=f"geometry-{split}-{seed}-{i}", messages=messages, reference=reference, verifier=verifier,
            images=images, meta={"options": options if form == "choice" else [], "sides": n, "teacher": said},
            target=f"<answer>{answer}</answer>",
        ))
    return samples


def build(split: str, size: int, seed: int, data: str | None = None, eval_data: str | None = None,
          columns: dict | None = None, image_root: str | None = None, max_bad_frac: float = 0.01,
          template: str = "answer", holdout_frac: float = 0.1, cache_dir: str | None = None,
          flaw_prob: float = 0.7, eval_size: int = 256) -> list[Sample]:
    """Samples of a split: the rows of `data` (held-out slice or `eval_data` for eval), else synthetic."""
    instruction(template)  # validate early
    if data is None:
        return synthetic(split, size, seed, template, flaw_prob, eval_size)
    return load_real(split, size, seed, data, eval_data, columns, image_root, max_bad_frac, template,
                     holdout_frac, cache_dir, COLUMNS, qa_sample)
