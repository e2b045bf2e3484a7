"""Temporal verifiers: event order and time segments in videos."""

from __future__ import annotations

import math
import re

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import BadReference, finite_reference, register_verifier
from mmrlvr.verifiers.extract import MAX_CHARS, final_answer
from mmrlvr.verifiers.geometry import kendall_tau, segment_iou

_SPLIT = re.compile(r"\s*(?:,|->|→|=>|>|;|\bthen\b)\s*|\s+", re.I)  # no `\s*` around `\s`: linear


def parse_order(text: str) -> list[str]:
    """Labels in the order written: "C, A, B", "[C, A, B]", "C -> A -> B"."""
    text = text.strip()[:2000].strip("[](){}.").replace('"', "").replace("'", "")
    return [t for t in _SPLIT.split(text) if t]


@register_verifier("order", "ordering of labels: exact, or (Kendall tau + 1) / 2 (default)", headline="order_score")
def order(completion: str, sample) -> Verdict:
    """A missing, unknown or repeated label scores 0."""
    if not isinstance(sample.reference, (list, tuple)) or not sample.reference:
        raise BadReference(f"order reference {str(sample.reference)[:40]!r} is not a list of labels")
    ref = [str(x) for x in sample.reference]
    if len({x.casefold() for x in ref}) != len(ref):
        raise BadReference(f"order reference {ref[:8]} repeats a label")
    ans, failed = final_answer(completion)
    if failed and ans is None and "hedged" in failed.reason:
        return failed
    if ans is None:  # written bare: the last line holds the order
        ans = (completion[-MAX_CHARS:].strip().splitlines() or [""])[-1]
    pred = parse_order(ans)
    known = {x.casefold(): x for x in ref}
    pred = [known.get(p.casefold(), p) for p in pred]
    if len(set(pred)) != len(pred):
        return Verdict(0.0, "a label is repeated")
    if set(pred) != set(ref):
        missing, unknown = set(ref) - set(pred), set(pred) - set(ref)
        return Verdict(0.0, f"missing {sorted(missing)}" if missing else f"unknown {sorted(unknown)[:5]}")
    exact = float(pred == ref)
    meta = getattr(sample, "meta", None) or {}
    if meta.get("metric", "kendall") == "exact":
        return Verdict(exact, "exact order" if exact else "wrong order", {"exact": exact})
    tau = kendall_tau(pred, ref)
    return Verdict((tau + 1.0) / 2.0, f"Kendall tau {tau:.3f}", {"exact": exact, "tau": tau})


# one way to match each number, bounded digit and blank runs: linear on digit and space runs
_NUM = r"[-+]?(?:\d{1,40}(?:\.\d{0,40})?|\.\d{1,40})"
_S = r"\s{0,8}"
_SEGMENT = re.compile(rf"({_NUM}){_S}(?:s|sec|seconds)?{_S}(?:,|-|–|to|until|and){_S}({_NUM})", re.I)


# {"start_time": 2.5, "end_time": "7.0"}: the format Temporal-R1 and similar datasets prompt for
_JSON_TIME = re.compile(rf'"(start_time|end_time)"{_S}:{_S}"?{_S}({_NUM}){_S}"?')


def _json_segment(text: str) -> tuple[float, float] | None:
    """(start, end) of one `"start_time"` and one `"end_time"` (numbers or numeric strings)."""
    found = _JSON_TIME.findall(text)
    if sorted(k for k, _ in found) != ["end_time", "start_time"]:
        return None
    times = dict(found)
    return float(times["start_time"]), float(times["end_time"])


def parse_segment(text: str) -> tuple[float, float] | None:
    """[start, end] in seconds from "[2.5, 7.0]", "from 2.5 to 7.0 seconds", "between 2.5 and 7.0 seconds"
    (TimeZero's reward reads "s and e"), "2.5 - 7.0", "2.5s - 7s", "2.5, 7.0" or `{"start_time": "2.5", "end_time": "7.0"}`; None for anything else."""
    text = text[-2000:]
    if '"start_time"' in text or '"end_time"' in text:
        seg = _json_segment(text)
        return seg if seg is not None and math.isfinite(seg[0]) and math.isfinite(seg[1]) else None
    found = _SEGMENT.findall(text)
    if len(found) != 1:
        return None
    start, end = float(found[0][0]), float(found[0][1])
    return (start, end) if math.isfinite(start) and math.isfinite(end) else None


@register_verifier("tiou", "temporal IoU of a [start, end] segment in seconds", headline="mean_tiou")
def tiou(completion: str, sample) -> Verdict:
    """Score = temporal IoU; an end before its start scores 0. Formats: see `parse_segment`."""
    ref = finite_reference(sample.reference if isinstance(sample.reference, (list, tuple)) else [sample.reference], 2, "tiou reference")
    if ref[1] <= ref[0]:
        raise BadReference(f"tiou reference {ref} ends before it starts")
    ans, failed = final_answer(completion, fallback_to_text=True)
    if failed:
        return failed
    seg = parse_segment(ans)
    if seg is None:
        return Verdict(0.0, "no single [start, end] segment")
    if seg[1] <= seg[0]:
        return Verdict(0.0, "segment ends before it starts")
    value = segment_iou(seg, ref)
    return Verdict(value, f"tIoU {value:.3f}", {"tiou": value})
