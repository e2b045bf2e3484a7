"""Training curves from `metrics.jsonl`, several runs on one figure (one panel per metric)."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from mmrlvr.jsonl import iter_jsonl

# The panels a person looks at first; patterns expand to every matching metric of any run.
DEFAULT_METRICS = (
    "reward/mean", "eval/*/accuracy", "loss/kl", "actor/entropy", "actor/clip_frac*",
    "tokens/perception_frac", "temporal/ordered_acc",
)


# Metrics that live in [0, 1] by definition: drawn on a fixed 0-1 axis, so a wobble of 0.02 over a
# four-step run does not fill the panel and look like learning.
UNIT_RANGE = ("reward/*", "eval/*/accuracy", "eval/*/reward*", "*_frac", "*_frac/*", "*/accuracy", "temporal/*_acc")


def fixed_ylim(name: str, values: Sequence[float]) -> tuple[float, float] | None:
    """(0, 1) with a margin for a [0, 1] metric whose values stay in [0, 1], else None (auto)."""
    vals = [v for v in values if np.isfinite(v)]
    if vals and any(fnmatch.fnmatch(name, pat) for pat in UNIT_RANGE) and 0.0 <= min(vals) and max(vals) <= 1.0:
        return (-0.03, 1.03)
    return None


def metrics_path(path: str | Path) -> Path:
    path = Path(path)
    return path / "metrics.jsonl" if path.is_dir() else path


def read_metrics(path: str | Path) -> list[dict]:
    """Rows of a run's metrics.jsonl (a run directory or the file); bad lines name file:line."""
    path = metrics_path(path)
    rows = []
    for lineno, row in iter_jsonl(path):
        if not isinstance(row, dict) or not isinstance(row.get("step"), (int, float)):
            raise ValueError(f"{path}:{lineno}: expected an object with a numeric 'step'")
        rows.append(row)
    return rows


def series(rows: Sequence[dict], name: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one metric, in step order; a step logged twice keeps its last value."""
    last: dict = {}
    for row in rows:
        if isinstance(row.get(name), (int, float)):
            last[row["step"]] = float(row[name])
    steps = sorted(last)
    return np.array(steps, dtype=float), np.array([last[s] for s in steps], dtype=float)


def expand_metrics(patterns: Sequence[str], runs: Mapping[str, Sequence[dict]]) -> list[str]:
    """Metric names matching the patterns (fnmatch) in any run, in pattern order, no repeats."""
    names = sorted({k for rows in runs.values() for row in rows for k in row if k != "step"})
    out: list[str] = []
    for pat in patterns:
        for name in (n for n in names if fnmatch.fnmatchcase(n, pat)):
            if name not in out:
                out.append(name)
    return out


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over `window` points (the first points average what exists)."""
    if window <= 1 or len(values) == 0:
        return values
    c = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def _as_runs(runs) -> dict[str, list[dict]]:
    if isinstance(runs, (str, Path)):
        runs = [runs]
    if not isinstance(runs, Mapping):
        runs = {Path(p).name if Path(p).is_dir() else Path(p).parent.name: p for p in runs}
    return {label: (src if isinstance(src, list) else read_metrics(src)) for label, src in runs.items()}


def plot_curves(runs, metrics: Sequence[str] = DEFAULT_METRICS, window: int = 1, ncols: int = 3,
                title: str | None = None):
    """Figure with a panel per metric and a line per run.

    `runs`: a run directory or metrics.jsonl path, a list of them (labelled by folder name), or a
    {label: path or rows} mapping. `metrics` are names or fnmatch patterns; panels no run has are
    left out. `window` > 1 draws a trailing moving average over the raw values (kept faint).
    """
    from matplotlib.ticker import MaxNLocator

    from mmrlvr.viz.figure import new_figure

    data = _as_runs(runs)
    names = expand_metrics(metrics, data)
    if not names:
        raise ValueError(f"none of {list(metrics)} is in the runs' metrics")
    ncols = min(ncols, len(names))
    nrows = -(-len(names) // ncols)
    fig, axes = new_figure(nrows, ncols, width=3.6 * ncols, height=2.7 * nrows)
    colors = [f"C{i}" for i in range(10)]
    for ax, name in zip([a for row in axes for a in row], names):
        seen: list = []
        for i, (label, rows) in enumerate(data.items()):
            x, y = series(rows, name)
            if not len(x):
                continue
            seen += list(y)
            color = colors[i % len(colors)]
            few = len(x) <= 12
            if window > 1 and not few:
                ax.plot(x, y, color=color, alpha=0.25, linewidth=0.8)
                ax.plot(x, smooth(y, window), color=color, label=label, linewidth=1.6)
            else:
                ax.plot(x, y, color=color, label=label, marker="o" if few else None, markersize=3)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ylim = fixed_ylim(name, seen)
        if ylim is not None:
            ax.set_ylim(*ylim)
    for ax in [a for row in axes for a in row][len(names):]:
        ax.axis("off")
    legend: dict = {}
    for ax in [a for row in axes for a in row]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=min(len(legend), 4),
               fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
