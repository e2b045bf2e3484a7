"""chart: questions about bar and line charts; numbers by `number` (relaxed 5%), text by `exact`.

Real data (`data:` set): ChartQA rows (`imgname` relative to `image_root`, `query`, `label`) and
MATH-V statistics JSONL (`question`, `options`, `answer`, `image`). Rows with options are scored by
`choice`; a free-form answer that is a single number by `number` (5% relative tolerance, as in
ChartQA's relaxed accuracy), any other text by `exact` after normalisation.

Synthetic (no `data:`): a bar chart of four coloured bars or a line chart of four points, values
1-5, on a 112x140 image whose value unit is 28 px (one merged visual token of a Qwen2-VL-family
model, so a tiny model can learn to read it) over a faint unit grid. Questions: the value of one
bar, the largest value, the largest minus the smallest, the colour of the tallest bar (asked only
when one bar is tallest). The warm start imitates a teacher that reads a value of 4 as 5
`flaw_prob` of the time (its answers follow from those misreadings); RL against the verifiers
corrects the over-reading.
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from mmrlvr.data.prompts import PromptSpec, instruction, prompt_spec, user_messages
from mmrlvr.data.qa import teacher_problem, load_real, qa_sample
from mmrlvr.data.synthetic import png_bytes, seeded_items
from mmrlvr.types import Sample
from mmrlvr.verifiers.answer import parse_number

MEDIA = ("image",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('choice', 'number', 'exact')  # what its samples are scored by (each sample's own verifier)

COLUMNS = {
    "image": ["image", "images", "imgname", "image_path"],
    "question": ["question", "query", "problem"],
    "answer": ["answer", "label"],
    "options": ["options", "choices"],
    "id": ["id", "pid", "question_id"],
    "prompt": ["prompt"],  # the whole user text, when the data carries it (TRL style)
}
COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "orange": (240, 150, 20)}
WIDTH, UNIT, LEVELS = 112, 28, 5  # value v reaches v units of 28 px up from the bottom
BASE = UNIT * LEVELS  # image height; the baseline is its bottom edge
KINDS = ("value", "max", "diff", "tallest")


def free_form_verifier(answer: str) -> str:
    """`number` when the answer is one number ("12", "1,250", "45%"), else `exact`."""
    return "number" if parse_number(answer) is not None else "exact"


def chart_sample(row, source: str, template: PromptSpec) -> Sample:
    return qa_sample(row, source, template, free_form=free_form_verifier)


# --- synthetic ------------------------------------------------------------------------------

def _chart(rng: random.Random, kinds: tuple = ("bar", "line"), questions: tuple = KINDS) -> tuple:
    kind = rng.choice(kinds)
    values = tuple(rng.randint(1, LEVELS) for _ in range(4))
    colors = tuple(rng.sample(sorted(COLORS), 4))
    asks = [q for q in questions if kind == "bar" or q in ("max", "diff")]
    if "tallest" in asks and values.count(max(values)) > 1:
        asks.remove("tallest")
    return kind, values, colors, rng.choice(asks or ["max"]), rng.randrange(4)


def _draw(kind: str, values: tuple, colors: tuple) -> Image.Image:
    img = Image.new("RGB", (WIDTH, BASE), (250, 250, 250))
    d = ImageDraw.Draw(img)
    for v in range(1, LEVELS):
        d.line([(0, BASE - v * UNIT), (WIDTH - 1, BASE - v * UNIT)], fill=(215, 215, 215))
    xs = [UNIT * i for i in range(4)]  # each bar or point in its own 28 px column
    if kind == "bar":
        for x, v, c in zip(xs, values, colors):
            d.rectangle([x + 4, BASE - v * UNIT, x + UNIT - 5, BASE - 1], fill=COLORS[c])
    else:
        pts = [(x + UNIT // 2, BASE - v * UNIT + 4) for x, v in zip(xs, values)]
        d.line(pts, fill=(40, 40, 40), width=2)
        for x, y in pts:
            d.ellipse([x - 4, y - 4, x + 4, y + 4], fill=(40, 80, 220))
    return img


def _answer(question: str, values: tuple, colors: tuple, target: int):
    if question == "value":
        return values[target]
    if question == "max":
        return max(values)
    if question == "diff":
        return max(values) - min(values)
    return colors[values.index(max(values))]


def _teacher_reads(values: tuple, rng: random.Random, flaw_prob: float) -> tuple:
    """The values as the teacher reads them: 4 is read as 5 `flaw_prob` of the time."""
    return tuple(5 if v == 4 and rng.random() < flaw_prob else v for v in values)


def _question_text(question: str, kind: str, colors: tuple, target: int) -> str:
    if question == "value":
        return f"What is the value of the {colors[target]} bar? Answer with a number."
    if question == "max":
        return f"What is the largest value in the {kind} chart? Answer with a number."
    if question == "diff":
        return f"What is the difference between the largest and the smallest value in the {kind} chart? Answer with a number."
    return "Which colour is the tallest bar? Answer with the colour."


def synthetic(split: str, size: int, seed: int, template: PromptSpec, flaw_prob: float, eval_size: int,
              kinds: tuple = ("bar", "line"), questions: tuple = KINDS) -> list[Sample]:
    bad = [k for k in kinds if k not in ("bar", "line")] + [q for q in questions if q not in KINDS]
    if bad or not kinds or not questions:
        raise ValueError(f"chart: unknown chart kinds or questions {bad}; kinds: bar, line; questions: {', '.join(KINDS)}")
    draw = lambda r: _chart(r, tuple(kinds), tuple(questions))  # noqa: E731
    items, rng = seeded_items("chart", split, size, seed, draw, eval_size, key=lambda it: (it[0], it[1], it[2] if it[0] == "bar" else None))
    samples = []
    for i, (kind, values, colors, question, target) in enumerate(items):
        reference = _answer(question, values, colors, target)
        said = _answer(question, _teacher_reads(values, rng, flaw_prob), colors, target)
        text = _question_text(question, kind, colors, target)
        fields = {"question": text, "options": [], "options_text": "", "answer_format": instruction(template.template)}
        messages, images = user_messages(template, text, [png_bytes(_draw(kind, values, colors))],
                                         instruction(template.template), fields)
        samples.append(Sample(
            id=f"chart-{split}-{seed}-{i}", messages=messages, reference=str(reference),
            verifier="exact" if question == "tallest" else "number", images=images,
            meta={"kind": kind, "question": question, "values": list(values), "teacher": str(said)},
            target=f"<answer>{said}</answer>",
        ))
    return samples


def build(split: str, size: int, seed: int, data: str | None = None, eval_data: str | None = None,
          columns: dict | None = None, image_root: str | None = None, max_bad_frac: float | None = None,
          template: str = "answer", holdout_frac: float = 0.1, cache_dir: str | None = None,
          flaw_prob: float = 0.7, eval_size: int = 256, prompt_template: str | None = None,
          system_prompt: str | None = None, kinds: tuple = ("bar", "line"),
          questions: tuple = KINDS) -> list[Sample]:
    """Samples of a split: the rows of `data` (held-out slice or `eval_data` for eval), else synthetic
    (`kinds` and `questions` choose the synthetic charts and what is asked about them)."""
    template = prompt_spec(template, prompt_template, system_prompt)  # validate early
    if data is None:
        return synthetic(split, size, seed, template, flaw_prob, eval_size, kinds, questions)
    return load_real(split, size, seed, data, eval_data, columns, image_root, max_bad_frac, template,
                     holdout_frac, cache_dir, COLUMNS, chart_sample)
