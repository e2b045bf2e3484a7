"""grounding: "where is X?" answered with a box, scored by IoU (`iou`; several objects: `boxes`).

The sample's `reference` is the box `[x1, y1, x2, y2]` in pixels of the ORIGINAL image. `meta`
carries `image_size` (original width, height), `input_size` (the processor-resized size, filled
in when the batch is encoded) and `box_format`, the coordinates the model answers in:
- `norm1000`: relative 0-1000 units (Qwen2-VL, Qwen3-VL, InternVL, Gemma 3),
- `norm1`: relative 0-1 units (LLaVA-OneVision, Idefics3/SmolVLM),
- `absolute`: pixels of the processor-resized image (Qwen2.5-VL, and the embedded tiny model);
the table is `mmrlvr.verifiers.grounding.FAMILY_BOX_FORMATS`.
`coords: auto` picks by the model's `config.model_type`; set `coords` to override.

Real data (`data:` set): RefCOCO-style rows (`image`, a referring expression in `question`, a box
in `answer`, `box_format: xyxy | xywh | xyxy_norm | xywh_norm` in the task args; a file whose boxes
contradict the declared format stops with the format to set, see `_boxes.py`; a box outside its
image, whose size is read from the header, is a bad row) and VOC-style rows (`filename`,
`objects` with `xmin..ymax` strings, as in the raccoon sample): one sample per image, `iou` for
one object and `boxes` (F1 at IoU >= 0.5) for several.

Synthetic (no `data:`): `n_shapes` (default 3) 16 px shapes of distinct colours, each centred in its
own cell of a 4x4 grid of 28 px cells (one merged visual token each) on a 112x112 image, "Where is
the red circle?". The box follows from the cell. With `ramp` (default) the background's shade
encodes position (see `_draw`). The warm start imitates a teacher whose boxes are `pad` pixels too
loose on every side `flaw_prob` of the time (IoU 0.33 at the default pad of 6); RL against IoU
moves and tightens them. `configs/grounding_tiny.yaml` uses one shape: with three, a CPU-sized
warm start of the tiny model does not learn which one is named and where it is (mean IoU 0.03).
"""

from __future__ import annotations

import re
from pathlib import Path

import json
import math
import random

import numpy as np
from PIL import Image, ImageDraw

from mmrlvr.data.heldout import split_positions
from mmrlvr.data.io import BadRow, DataError, Row, build_samples, read_rows
from mmrlvr.tasks._policy import bad_frac
from mmrlvr.tasks._boxes import BOX_FORMATS, box_outside, check_box_format, parse_box, require_convention
from mmrlvr.data.prompts import PromptSpec, instruction, prompt_spec, user_messages
from mmrlvr.data.qa import extra_columns, split_extra
from mmrlvr.data.synthetic import draw_shape, png_bytes, seeded_items
from mmrlvr.types import Sample
from mmrlvr.verifiers.grounding import family_box_format

MEDIA = ("image",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('iou', 'boxes')  # what its samples are scored by (each sample's own verifier)

COLUMNS = {
    "image": ["image", "images", "filename", "file_name", "imgname", "image_path"],
    "question": ["question", "expression", "sentence", "ref", "referring_expression", "problem", "caption"],
    "answer": ["answer", "bbox", "box", "solution"],
    "objects": ["objects"],
    "id": ["id", "ann_id", "question_id"],
    "prompt": ["prompt"],  # the whole user text, when the data carries it (TRL style)
}
UNITS = {"norm1000": "relative coordinates from 0 to 1000", "norm1": "relative coordinates from 0 to 1",
         "absolute": "pixels of the image"}
SHAPES = ("circle", "square", "triangle")
COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 30)}
GRID, CELL, SIZE, SHAPE = 4, 28, 112, 16
RAMP = 150  # background levels added across the image (see _draw)


def __getattr__(name: str):
    if name == "CONVENTIONS":  # per model family, from each family's record (mmrlvr.verifiers.grounding)
        from mmrlvr.verifiers import grounding

        return grounding.FAMILY_BOX_FORMATS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def box_format_for(coords: str, model_type: str | None) -> str:
    """The coordinate convention: an explicit `coords`, else the model family's (see module doc)."""
    if coords != "auto":
        if coords not in UNITS:
            raise ValueError(f"coords {coords!r} unknown; known: auto, {', '.join(UNITS)}")
        return coords
    return family_box_format(model_type)


def _bare_noun(what: str) -> str:
    """"the raccoon" -> "raccoon": the shipped wording brings its own article ("Where is the ..."), and a
    referring expression often starts with one ("Where is the the raccoon" otherwise)."""
    return re.sub(r"^(?:the|an?)\s+", "", what.strip(), flags=re.IGNORECASE) or what


def _prompt(what: str, fmt: str, several: bool, template: str) -> str:
    what = _bare_noun(what)
    ask = f"Locate every {what} in the image, one box each" if several else f"Where is the {what} in the image?"
    return f"{ask} Answer with the bounding box [x1, y1, x2, y2] in {UNITS[fmt]}. {instruction(template)}".strip()


def _messages(spec: PromptSpec, images, what: str, fmt: str, several: bool, columns: dict | None = None,
              prompt: str | None = None):
    """The shipped wording, or the user's template with `question` (the object), `units`, `answer_format`."""
    fields = {**(columns or {}), "question": what, "units": UNITS[fmt], "box_format": fmt, "several": several,
              "answer_format": instruction(spec.template), "columns": columns or {}}
    return user_messages(spec, "", images, _prompt(what, fmt, several, spec.template), fields, prompt)


def _meta(fmt: str, row: Row | None, source: str, image_size=None, columns: dict | None = None) -> dict:
    meta = {"box_format": fmt, "image_size": image_size, "input_size": None}
    if row is not None:
        meta.update(row=row.index, source=source)
    if columns:
        meta["columns"] = columns
    return meta


def real_sample(row: Row, source: str, template: PromptSpec, fmt: str, box_format: str) -> Sample:
    if len(row.images) != 1:
        raise BadRow(f"grounding needs one image per row, the row has {len(row.images)}")
    fields, columns = split_extra(row.fields)
    objects, rid = fields.get("objects"), fields.get("id")
    sid = f"{Path(source).name}:{rid if rid is not None else row.index}"
    if objects is not None and row.fields.get("answer") is None:  # VOC-style rows
        if not objects:
            raise BadRow("no objects")
        boxes = [parse_box(o, "xyxy") for o in objects]
        names = sorted({str(o.get("class") or "object") for o in objects})
        what = " or ".join(names)
        first = objects[0]
        size = (int(first["width"]), int(first["height"])) if first.get("width") and first.get("height") else None
        outside = next((b for b in boxes if size and box_outside(b, size)), None)
        if outside is not None:  # no answer inside the image could ever match it
            raise BadRow(f"field 'objects': box {outside} lies outside the {size[0]}x{size[1]} image")
        messages, images = _messages(template, row.images, what, fmt, len(boxes) > 1, columns, fields.get("prompt"))
        reference, verifier = (boxes[0], "iou") if len(boxes) == 1 else (boxes, "boxes")
        target = reference_target(boxes, fmt, size or image_size(row.images[0]) if fmt == "norm1000" else None)
        return Sample(sid, messages, reference, verifier, images, meta=_meta(fmt, row, source, size, columns), target=target)
    question = row.fields.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BadRow("referring expression (question) is missing")
    if row.fields.get("answer") is None:
        raise BadRow("box (answer) is missing")
    header = image_size(row.images[0])  # (w, h) from the image header, no decode; None if unreadable
    size = header if box_format.endswith("_norm") else None
    box = parse_box(row.fields["answer"], box_format, size)
    if header and box_outside(box, header):  # an unreadable image keeps its row: bad media at decode
        raise BadRow(f"field 'answer': box {box} lies outside the {header[0]}x{header[1]} image")
    messages, images = _messages(template, row.images, question.strip().rstrip("?."), fmt, False, columns, fields.get("prompt"))
    target = reference_target([box], fmt, header if fmt == "norm1000" else None)
    return Sample(sid, messages, box, "iou", images, meta=_meta(fmt, row, source, size, columns), target=target)


def image_size(ref) -> tuple[int, int] | None:
    """(width, height) from the image header (no decode), or None when it cannot be opened."""
    from mmrlvr.data.media import _open

    try:
        img = _open(ref, None)[0]
        size = img.size
        if img is not ref:  # a file or bytes opened here: let go of it now (a row loop opens thousands)
            img.close()
        return size
    except Exception:  # noqa: BLE001 - a bad image is reported when it is decoded
        return None


def reference_target(boxes: list, fmt: str, size) -> str | None:
    """A teacher completion from the reference boxes, for the warm start on real rows: exact in
    relative units (`norm1000`: box / image size * 1000). In `absolute` units the model answers in
    pixels of the processor-resized image, unknown until the batch is encoded: no target then
    (`teacher_problem` says what to do before the model loads)."""
    if fmt != "norm1000" or not size:
        return None
    w, h = size
    scaled = [[round(b[0] / w * 1000), round(b[1] / h * 1000), round(b[2] / w * 1000), round(b[3] / h * 1000)] for b in boxes]
    return f"<answer>{json.dumps(scaled[0] if len(scaled) == 1 else scaled)}</answer>"


def teacher_problem(args: dict, model_type: str | None) -> str | None:
    """Why a warm start has no teacher completions with these args (one line saying what to do), or None."""
    if args.get("data") is None:
        return None
    fmt = box_format_for(args.get("coords", "auto"), model_type)
    if fmt == "norm1000":
        return None
    return (f"grounding on real rows (task.args.data) has no teacher boxes in {fmt} units ({model_type or 'tiny'} "
            "answers in pixels of the resized image); set warm_start.steps=0 to start RL from the loaded model, "
            "task.args.coords=norm1000 to warm-start on the reference boxes, or warm_start.checkpoint")


# --- synthetic ------------------------------------------------------------------------------

def _scene(rng: random.Random, n_shapes: int = 3) -> tuple:
    kinds = [(c, rng.choice(SHAPES)) for c in rng.sample(sorted(COLORS), n_shapes)]  # distinct colours
    cells = rng.sample(range(GRID * GRID), n_shapes)
    placed = []
    for (color, shape), cell in zip(kinds, cells):
        r, c = divmod(cell, GRID)  # a SHAPE px shape centred in its 28 px cell: the box follows from the cell
        placed.append((color, shape, c * CELL + (CELL - SHAPE) // 2, r * CELL + (CELL - SHAPE) // 2, SHAPE))
    return tuple(placed), rng.randrange(n_shapes)


def _draw(placed: tuple, ramp: bool = True) -> Image.Image:
    """The board. With `ramp`, the background's red channel falls left to right and its blue channel
    top to bottom (by RAMP levels): the tiny model's vision tower and decoder carry position only
    through rotary embeddings, which steer attention but put no position into what a token says.
    Without the ramp a 300-step warm start answers boxes at chance (held-out mean IoU 0.005, one
    shape); with it, 0.28, which 40 GRPO steps raise to 0.66 (seed 0)."""
    if ramp:
        x = np.linspace(0, RAMP, SIZE)[None, :].repeat(SIZE, 0)
        y = np.linspace(0, RAMP, SIZE)[:, None].repeat(SIZE, 1)
        pixels = np.stack([250 - x, np.full_like(x, 235), 250 - y], axis=2).round().astype(np.uint8)
        img = Image.fromarray(pixels, "RGB")
    else:
        img = Image.new("RGB", (SIZE, SIZE), (235, 235, 235))
    d = ImageDraw.Draw(img)
    for color, shape, x0, y0, size in placed:
        draw_shape(d, shape, x0, y0, size, COLORS[color])
    return img


def _in_format(box: list[float], fmt: str) -> list[float]:
    """A synthetic box in the model's units (112x112 images are not resized by Qwen processors)."""
    if fmt == "norm1":  # two decimals, as LLaVA's grounding data writes them
        return [round(v / SIZE, 2) for v in box]
    scale = 1000.0 / SIZE if fmt == "norm1000" else 1.0
    return [round(v * scale) for v in box]


def synthetic(split: str, size: int, seed: int, template: PromptSpec, fmt: str, flaw_prob: float, pad: int,
              eval_size: int, ramp: bool = True, n_shapes: int = 3) -> list[Sample]:
    if not 1 <= n_shapes <= len(COLORS):
        raise ValueError(f"grounding: n_shapes {n_shapes} must be 1-{len(COLORS)} (one colour each)")
    draw = lambda r: _scene(r, n_shapes)  # noqa: E731
    items, rng = seeded_items("grounding", split, size, seed, draw, eval_size, key=lambda it: it[0])
    samples = []
    for i, (placed, which) in enumerate(items):
        color, shape, x0, y0, s = placed[which]
        box = [x0, y0, x0 + s, y0 + s]
        loose = rng.random() < flaw_prob
        said = [max(0, box[0] - pad), max(0, box[1] - pad), min(SIZE, box[2] + pad), min(SIZE, box[3] + pad)] if loose else box
        messages, images = _messages(template, [png_bytes(_draw(placed, ramp))], f"{color} {shape}", fmt, False)
        samples.append(Sample(
            id=f"grounding-{split}-{seed}-{i}", messages=messages, reference=[float(v) for v in box], verifier="iou",
            images=images, meta={**_meta(fmt, None, "", (SIZE, SIZE)), "teacher_loose": loose},
            target=f"<answer>{json.dumps(_in_format(said, fmt))}</answer>",
        ))
    return samples


def build(split: str, size: int, seed: int, data: str | None = None, eval_data: str | None = None,
          columns: dict | None = None, image_root: str | None = None, max_bad_frac: float | None = None,
          template: str = "answer", holdout_frac: float = 0.1, cache_dir: str | None = None,
          box_format: str = "xyxy", coords: str = "auto", model_type: str | None = None,
          flaw_prob: float = 0.7, pad: int = 6, eval_size: int = 256, ramp: bool = True,
          n_shapes: int = 3, prompt_template: str | None = None, system_prompt: str | None = None) -> list[Sample]:
    """Samples of a split: the rows of `data` (held-out slice or `eval_data` for eval), else synthetic."""
    template = prompt_spec(template, prompt_template, system_prompt)  # validate early
    fmt = box_format_for(coords, model_type)
    check_box_format(box_format)
    if data is None:
        return synthetic(split, size, seed, template, fmt, flaw_prob, pad, eval_size, ramp, n_shapes)
    spec = eval_data if (split == "eval" and eval_data) else data
    mapping = extra_columns(spec, {**COLUMNS, **(columns or {})}, cache_dir)
    # a row's box comes from `answer` or `objects`: a file with neither is named with any other
    # missing column in one line, not as every row failing "box (answer) is missing"
    source, ds, rows = read_rows(spec, mapping, required=("image", ("answer", "objects"), *(columns or {})),
                                 image_root=image_root, cache_dir=cache_dir)
    require_convention(source, [(r.index, r.fields["answer"]) for r in rows
                                if isinstance(r, Row) and r.fields.get("answer") is not None], box_format)
    keep = split_positions(len(rows), split, size, seed, eval_data=bool(eval_data), holdout_frac=holdout_frac)
    return build_samples(source, rows, lambda r: real_sample(r, source, template, fmt, box_format),
                         bad_frac(max_bad_frac, len(rows)), keep)
