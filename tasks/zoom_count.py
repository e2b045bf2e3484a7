"""Synthetic zoom: "How many red dots are in the box [x1, y1, x2, y2]?" on a large canvas.

The canvas is `regions` x `regions` squares of `region` px (4 x 112 = 448 px by default), each
holding 0 to `max_dots` small red dots (`dot` px wide, one per 28 px sub-cell). The question names
one square by its pixel box. At the configured `model.max_pixels` (112 x 112 in
configs/zoom_tools_tiny.yaml) the whole canvas is 4 x 4 merged visual tokens: one token per square,
its dots a few pixels of red, which the base resolution cannot count. The `tools` episode lets the
policy write `<zoom>[x1, y1, x2, y2]</zoom>` and see the square enlarged to 112 x 112 (16 tokens,
one per sub-cell), where counting is the counting task's.

Warm start: training rows carry teacher targets for both turns: a `zoomed_share` of the training
rows are the conversation after the zoom (the canvas question, the zoom call, the enlarged square
as the tool's answer) with target `<answer>N</answer>`, whose teacher over-counts boards of
`flaw_min` or more dots with probability `flaw_prob` (RL has something to correct); the others
target the zoom call itself. Evaluation rows are always the plain question (the episode decides).
Scored by the `count` verifier against the dots in the named square. `tool=false` builds the
baseline without the tool (direct answers from the whole canvas, `rollout.episode: single`).
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from mmrlvr.data.synthetic import seeded_items
from mmrlvr.data.zoom import RESULT_TEXT, zoom
from mmrlvr.types import Sample

MEDIA = ("image",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ("count",)
SUB = 28  # sub-cell px: one merged visual token of a Qwen2-VL-family model at full resolution
ASK = "How many red dots are in the box {box}? You may zoom with <zoom>[x1, y1, x2, y2]</zoom>. Answer as <answer>N</answer>."
ASK_PLAIN = "How many red dots are in the box {box}? Answer as <answer>N</answer>."


def _layout(rng: random.Random, regions: int, region: int, max_dots: int) -> tuple:
    per = region // SUB
    counts = tuple(rng.randint(0, max_dots) for _ in range(regions * regions))
    dots = tuple(tuple(sorted(rng.sample(range(per * per), n))) for n in counts)
    return rng.randrange(regions * regions), dots


def _draw(layout: tuple, regions: int, region: int, dot: int, rng: random.Random) -> Image.Image:
    asked, dots = layout
    per = region // SUB
    img = Image.new("RGB", (regions * region, regions * region), (235, 235, 235))
    draw = ImageDraw.Draw(img)
    for k, cells in enumerate(dots):
        ry, rx = divmod(k, regions)
        for c in cells:
            cy, cx = divmod(c, per)
            x0 = rx * region + cx * SUB + rng.randint(2, SUB - dot - 2)
            y0 = ry * region + cy * SUB + rng.randint(2, SUB - dot - 2)
            draw.ellipse((x0, y0, x0 + dot, y0 + dot), fill=(220, 40, 40))
    return img


def box_of(asked: int, regions: int, region: int) -> list[int]:
    ry, rx = divmod(asked, regions)
    return [rx * region, ry * region, (rx + 1) * region, (ry + 1) * region]


def build(split: str, size: int, seed: int, regions: int = 4, region: int = 112, max_dots: int = 3, dot: int = 12,
          zoomed_share: float = 0.5, flaw_min: int = 3, flaw_prob: float = 0.5, eval_size: int = 256,
          tool: bool = True) -> list[Sample]:
    """Samples for "train" or "eval"; eval canvases are drawn first and excluded from train.

    `tool` false: the baseline without the tool: the question does not offer the zoom, no row is
    a zoomed conversation, and the teacher answers the count from the whole canvas."""
    if not (2 <= regions <= 8 and region % SUB == 0 and region >= SUB and 0 <= max_dots <= (region // SUB) ** 2
            and 2 <= dot <= SUB - 4 and 0 <= zoomed_share <= 1):
        raise ValueError(f"zoom_count: need 2 <= regions <= 8, region a multiple of {SUB}, 0 <= max_dots <= "
                         f"(region/{SUB})^2, 2 <= dot <= {SUB - 4}, zoomed_share in [0, 1]; got regions={regions}, "
                         f"region={region}, max_dots={max_dots}, dot={dot}, zoomed_share={zoomed_share}")
    layouts, rng = seeded_items("zoom-count", split, size, seed, lambda r: _layout(r, regions, region, max_dots),
                                eval_size=eval_size)
    samples = []
    for i, lay in enumerate(layouts):
        asked, dots = lay
        box = box_of(asked, regions, region)
        n = len(dots[asked])
        image = _draw(lay, regions, region, dot, rng)
        ask = ASK.format(box=box) if tool else ASK_PLAIN.format(box=box)
        question = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": ask}]}
        call = f"<zoom>{box}</zoom>"
        meta = {"box": box, "dots": n}
        if tool and split == "train" and rng.random() < zoomed_share:
            teacher = n + 1 if n >= flaw_min and rng.random() < flaw_prob else n
            messages = (question, {"role": "assistant", "content": call},
                        {"role": "user", "content": [{"type": "text", "text": RESULT_TEXT.format(box=box)},
                                                     {"type": "image"}]})
            crop = zoom(image, tuple(box), region * region)
            samples.append(Sample(f"zoom-count-{split}-{seed}-{i}", messages, n, "count", (image, crop),
                                  meta={**meta, "zoomed": True}, target=f"<answer>{teacher}</answer>"))
        else:
            if not tool:
                teacher = n + 1 if n >= flaw_min and rng.random() < flaw_prob else n
            samples.append(Sample(f"zoom-count-{split}-{seed}-{i}", (question,), n, "count", (image,),
                                  meta=meta, target=call if tool else f"<answer>{teacher}</answer>"))
    return samples
