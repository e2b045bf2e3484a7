"""geometry: diagram questions, multiple choice (`choice` verifier) or free form (`math`).

Real data (`data:` set): MATH-V JSONL (`question` with `<image1>`, `options`, `answer` a letter or
a value, `image` a relative path) and Geometry3K as packaged for EasyR1/verl (Parquet: `images` a
list of image dicts, `problem` with `<image>`, `answer`). Rows with options are scored by
`choice` (options in `meta.options`, listed in the prompt as "(A) ..."), the others by `math`.

Synthetic (no `data:`): a shaded rectangle drawn on a 4x4 grid of unit squares (28 px each, one
merged visual token of a Qwen2-VL-family model), "what is the area of the shaded rectangle?", asked
either as multiple choice ("(A) 2 (B) 3 (C) 4 (D) 6") or free form. Areas are 2, 3, 4 or 6 square
units (sides of 1-3 units). The supervised warm start imitates a flawed teacher that counts a side
of 3 units as 2 `flaw_prob` of the time (so it calls a 1x3 rectangle 2 and a 2x3 rectangle 4); RL
against the verifiers rewards the right area that the policy still samples.
"""

from __future__ import annotations

import colorsys
import random

from PIL import Image, ImageDraw

from mmrlvr.data.prompts import PromptSpec, instruction, prompt_spec, user_messages
from mmrlvr.data.qa import LETTERS, teacher_problem, load_real, options_text, qa_sample
from mmrlvr.data.synthetic import png_bytes, seeded_items
from mmrlvr.types import Sample

MEDIA = ("image",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('choice', 'math')  # what its samples are scored by (each sample's own verifier)

COLUMNS = {
    "image": ["image", "images", "image_path", "imgname"],
    "question": ["question", "problem", "query"],
    "answer": ["answer", "label"],
    "options": ["options", "choices"],
    "id": ["id", "pid", "question_id"],
    "prompt": ["prompt"],  # the whole user text, when the data carries it (TRL style)
}
AREAS = (2, 3, 4, 6)
SIDES = ((1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (2, 3), (3, 2))  # (width, height) in units
GRID, UNIT = 4, 28
SIZE = GRID * UNIT
QUESTION = "The figure is drawn on a grid of unit squares. What is the area of the shaded rectangle?"


# --- synthetic ------------------------------------------------------------------------------

def _rectangle(rng: random.Random) -> tuple:
    w, h = rng.choice(SIDES)
    x, y = rng.randint(0, GRID - w), rng.randint(0, GRID - h)
    color = rng.randrange(360)  # the fill's hue in degrees
    form = rng.choice(("choice", "free"))
    return w, h, x, y, color, form


def _draw(w: int, h: int, x: int, y: int, color: int) -> Image.Image:
    img = Image.new("RGB", (SIZE, SIZE), (245, 245, 245))
    d = ImageDraw.Draw(img)
    fill = tuple(round(255 * c) for c in colorsys.hsv_to_rgb(color / 360, 0.75, 0.85))
    d.rectangle([x * UNIT, y * UNIT, (x + w) * UNIT - 1, (y + h) * UNIT - 1], fill=fill)
    for k in range(GRID + 1):  # the unit grid, drawn over the fill so every square shows
        p = min(k * UNIT, SIZE - 1)
        d.line([(p, 0), (p, SIZE - 1)], fill=(90, 90, 90))
        d.line([(0, p), (SIZE - 1, p)], fill=(90, 90, 90))
    return img


def _teacher(w: int, h: int, rng: random.Random, flaw_prob: float) -> int:
    """The teacher's area: a side of 3 units is counted as 2 `flaw_prob` of the time."""
    if 3 in (w, h) and rng.random() < flaw_prob:
        return (2 if w == 3 else w) * (2 if h == 3 else h)
    return w * h


def synthetic(split: str, size: int, seed: int, template: PromptSpec, flaw_prob: float, eval_size: int) -> list[Sample]:
    # A 4x4 grid holds 31 such rectangles, so a held-out image differs from every training image
    # in its hue (360 of them): the held-out split tests areas on images never trained on, not
    # rectangles never seen.
    items, rng = seeded_items("geometry", split, size, seed, _rectangle, eval_size, key=lambda it: it[:5])
    options = [str(a) for a in AREAS]
    samples = []
    for i, (w, h, x, y, color, form) in enumerate(items):
        area, said = w * h, _teacher(w, h, rng, flaw_prob)
        suffix = instruction(template.template)
        if form == "choice":
            reference, verifier, answer = LETTERS[AREAS.index(area)], "choice", LETTERS[AREAS.index(said)]
            suffix = options_text(options) + "\n" + suffix
            question = QUESTION
        else:
            reference, verifier, answer = str(area), "math", str(said)
            question = QUESTION + " Answer with a number."
        fields = {"question": question, "options": options if form == "choice" else [], "answer_format": instruction(template.template),
                  "options_text": options_text(options) if form == "choice" else ""}
        messages, images = user_messages(template, question, [png_bytes(_draw(w, h, x, y, color))], suffix, fields)
        samples.append(Sample(
            id=f"geometry-{split}-{seed}-{i}", messages=messages, reference=reference, verifier=verifier,
            images=images, meta={"options": options if form == "choice" else [], "area": area, "sides": [w, h],
                                 "teacher": said},
            target=f"<answer>{answer}</answer>",
        ))
    return samples


def build(split: str, size: int, seed: int, data: str | None = None, eval_data: str | None = None,
          columns: dict | None = None, image_root: str | None = None, max_bad_frac: float | None = None,
          template: str = "answer", holdout_frac: float = 0.1, cache_dir: str | None = None,
          flaw_prob: float = 0.7, eval_size: int = 256, prompt_template: str | None = None,
          system_prompt: str | None = None) -> list[Sample]:
    """Samples of a split: the rows of `data` (held-out slice or `eval_data` for eval), else synthetic."""
    template = prompt_spec(template, prompt_template, system_prompt)  # validate early
    if data is None:
        return synthetic(split, size, seed, template, flaw_prob, eval_size)
    return load_real(split, size, seed, data, eval_data, columns, image_root, max_bad_frac, template,
                     holdout_frac, cache_dir, COLUMNS, qa_sample)
