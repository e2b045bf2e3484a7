"""Box and segment metrics: pure functions, property-tested."""

from __future__ import annotations

from typing import Sequence

Box = Sequence[float]  # x1, y1, x2, y2


def area(b: Box) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two xyxy boxes; 0 when either has no area."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0.0, iw) * max(0.0, ih)
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


def giou(a: Box, b: Box) -> float:
    """Generalised IoU in [-1, 1]: IoU minus the empty share of the smallest enclosing box."""
    enclose = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    if enclose <= 0:
        return -1.0
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0.0, iw) * max(0.0, ih)
    union = area(a) + area(b) - inter
    return (inter / union if union > 0 else 0.0) - (enclose - union) / enclose


def segment_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Temporal IoU of two [start, end] segments."""
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def kendall_tau(pred: Sequence, ref: Sequence) -> float:
    """Kendall's tau between two orderings of the same labels, in [-1, 1] (1 identical)."""
    pos = {x: i for i, x in enumerate(pred)}
    ranks = [pos[x] for x in ref]
    n = len(ranks)
    if n < 2:
        return 1.0
    s = 0
    for i in range(n):
        for j in range(i + 1, n):
            s += 1 if ranks[i] < ranks[j] else -1
    return s / (n * (n - 1) / 2)
