"""Token roles: each completion token coloured by its label and shaded by its weight.

Reads the diagnostics a run writes to `<run_dir>/token_roles/step_<N>.jsonl` (one JSON object per
completion: `tokens`, `labels` in perception / reasoning / both / other, `weights`, `signals`,
`reward`, `advantage`, `method`, ...). The label picks the hue; the weight the strength: a token
with weight 0 is nearly white, a token at the record's top weight is the full colour.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Sequence

from mmrlvr.jsonl import iter_jsonl

ROLE_COLORS = {  # colour-blind-safe hues (Okabe-Ito)
    "perception": (0, 114, 178),  # blue
    "reasoning": (230, 159, 0),  # orange
    "both": (204, 121, 167),  # purple-pink
    "other": (150, 150, 150),  # grey
}
ROLES = tuple(ROLE_COLORS)
MIN_SHADE = 0.15  # even a zero-weight token keeps a hint of its role's hue
_REQUIRED = {"tokens": list, "labels": list, "weights": list}


def _check_record(row, where: str) -> dict:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: not a JSON object")
    for key, kind in _REQUIRED.items():
        if not isinstance(row.get(key), kind):
            raise ValueError(f"{where}: field {key!r} missing or not a list")
    n = len(row["tokens"])
    for key in ("labels", "weights"):
        if len(row[key]) != n:
            raise ValueError(f"{where}: {len(row[key])} {key} for {n} tokens")
    bad = sorted({lab for lab in row["labels"] if lab not in ROLE_COLORS})
    if bad:
        raise ValueError(f"{where}: unknown labels {bad}; known: {', '.join(ROLES)}")
    return row


def token_roles_path(run_dir: str | Path, step: int | None = None) -> Path:
    """`<run_dir>/token_roles/step_<step>.jsonl`; the newest step when `step` is None."""
    folder = Path(run_dir) / "token_roles"
    if step is not None:
        return folder / f"step_{step}.jsonl"
    steps = sorted((int(m.group(1)), p) for p in folder.glob("step_*.jsonl") if (m := re.fullmatch(r"step_(\d+)\.jsonl", p.name)))
    if not steps:
        raise FileNotFoundError(f"no token_roles/step_N.jsonl in {run_dir}")
    return steps[-1][1]


def read_token_roles(path: str | Path, step: int | None = None) -> list[dict]:
    """Records of a token_roles JSONL file (or of a run directory's step), validated.

    A malformed line raises ValueError naming the file and line.
    """
    path = Path(path)
    if path.is_dir():
        path = token_roles_path(path, step)
    return [_check_record(row, f"{path}:{lineno}") for lineno, row in iter_jsonl(path)]


def token_color(label: str, weight: float, top: float) -> tuple[int, int, int]:
    """RGB of one token: its role's hue mixed with white by weight / top (floor MIN_SHADE)."""
    base = ROLE_COLORS[label]
    share = MIN_SHADE + (1 - MIN_SHADE) * min(max(float(weight) / top, 0.0), 1.0) if top > 0 else MIN_SHADE
    return tuple(round(255 - share * (255 - c)) for c in base)


def display_token(tok: str) -> str:
    """Make whitespace visible: byte-level BPE markers and newlines as readable characters."""
    return tok.replace("Ġ", " ").replace("Ċ", "\u21b5").replace("\n", "\u21b5")


def _top_weight(records: Sequence[dict]) -> float:
    return max((float(w) for r in records for w in r["weights"]), default=1.0) or 1.0


def _header(rec: dict) -> str:
    bits = [f"{k} {rec[k]}" for k in ("method", "sample_id") if k in rec]
    bits += [f"{k} {float(rec[k]):+.3f}" for k in ("reward", "advantage") if isinstance(rec.get(k), (int, float))]
    return " | ".join(bits)


def legend_html() -> str:
    cells = "".join(
        f'<span style="background:rgb{ROLE_COLORS[r]};color:white;padding:1px 6px;margin-right:4px">{r}</span>' for r in ROLES
    )
    return f'<div style="font-family:sans-serif;font-size:12px;margin:4px 0">{cells} (paler = lower weight)</div>'


def tokens_html(records: dict | Sequence[dict], top: float | None = None) -> str:
    """HTML for notebooks: one line per completion, each token a coloured span with its weight
    and signals in the tooltip. `top` fixes the weight that gets full colour (default: the max)."""
    records = [records] if isinstance(records, dict) else list(records)
    top = top if top is not None else _top_weight(records)
    lines = [legend_html()]
    for rec in records:
        spans = []
        for k, (tok, lab, w) in enumerate(zip(rec["tokens"], rec["labels"], rec["weights"])):
            tip = f"{lab}, weight {float(w):.3f}" + "".join(
                f", {name} {vals[k]:.3f}" for name, vals in (rec.get("signals") or {}).items()
                if isinstance(vals, list) and k < len(vals) and isinstance(vals[k], (int, float))
            )
            spans.append(
                f'<span title="{html.escape(tip)}" style="background:rgb{token_color(lab, w, top)};'
                f'padding:1px 0;white-space:pre">{html.escape(display_token(tok))}</span>'
            )
        lines.append(
            f'<div style="font-family:monospace;font-size:13px;margin:6px 0">'
            f'<div style="color:#555;font-size:11px">{html.escape(_header(rec))}</div>{"".join(spans)}</div>'
        )
    return "\n".join(lines)


def plot_token_roles(records: dict | Sequence[dict], top: float | None = None, width: float = 9.0,
                     chars_per_line: int = 80, title: str | None = None, show_weights: bool = True):
    """Figure for reports: each completion's tokens as coloured boxes, wrapped into lines, with
    each token's weight written under it (`show_weights`)."""
    from matplotlib.patches import Patch, Rectangle

    from mmrlvr.viz.figure import new_figure

    records = [records] if isinstance(records, dict) else list(records)
    top = top if top is not None else _top_weight(records)
    min_cols, line = (4, 1.6) if show_weights else (1, 1.0)
    layout, headers, y = [], [], 0.0  # tokens as (record, line, column, token index, width)
    for i, rec in enumerate(records):
        headers.append(y)
        y, col = y + 1, 0
        for k, tok in enumerate(rec["tokens"]):
            n = max(len(display_token(tok)), min_cols)
            if col and col + n > chars_per_line:
                y, col = y + line, 0
            layout.append((i, y, col, k, n))
            col += n
        y += line + 0.5
    fig, axes = new_figure(1, 1, width=width, height=0.9 + 0.24 * y)
    ax = axes[0][0]
    ax.set_xlim(0, chars_per_line)
    ax.set_ylim(y, -0.5)
    ax.axis("off")
    for rec, hy in zip(records, headers):
        ax.text(0, hy + 0.5, _header(rec), fontsize=7, color="#444", va="center")
    for i, ly, col, k, n in layout:
        rec = records[i]
        color = [c / 255 for c in token_color(rec["labels"][k], rec["weights"][k], top)]
        ax.add_patch(Rectangle((col, ly), n, 0.9, facecolor=color, edgecolor="white", linewidth=0.5))
        ax.text(col + 0.1, ly + 0.45, display_token(rec["tokens"][k]), fontsize=7, family="monospace", va="center")
        if show_weights:
            ax.text(col + 0.1, ly + 1.2, f"{float(rec['weights'][k]):.2f}", fontsize=5, color="#555", va="center")
    handles = [Patch(color=[c / 255 for c in ROLE_COLORS[r]], label=r) for r in ROLES]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=7, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def role_summary(records: Sequence[dict]) -> dict:
    """Per role: share of tokens and mean weight, over all records (for comparing methods)."""
    counts = {r: 0 for r in ROLES}
    weights = {r: 0.0 for r in ROLES}
    for rec in records:
        for lab, w in zip(rec["labels"], rec["weights"]):
            counts[lab] += 1
            weights[lab] += float(w)
    total = sum(counts.values()) or 1
    return {r: {"share": counts[r] / total, "mean_weight": weights[r] / counts[r] if counts[r] else None} for r in ROLES}


def step_table(record: dict) -> list[dict]:
    """One KAWHI completion's steps (a token_roles record with the `step_ids` signal): per step its
    text, token count, mean region attention, mean entropy and (constant within the step) weight."""
    sig = record["signals"]
    if "step_ids" not in sig:
        raise KeyError("step_table needs a record written with token_weighting.method=kawhi (signal step_ids)")
    rows: dict[int, dict] = {}
    for i, k in enumerate(int(x) for x in sig["step_ids"]):
        r = rows.setdefault(k, {"step": k, "text": "", "tokens": 0, "region_attention": 0.0, "entropy": 0.0,
                                "weight": record["weights"][i]})
        r["text"] += record["tokens"][i]
        r["tokens"] += 1
        r["region_attention"] += sig.get("region_attention", [0.0] * (i + 1))[i]
        r["entropy"] += sig.get("entropy", [0.0] * (i + 1))[i]
    for r in rows.values():
        r["region_attention"] /= r["tokens"]
        r["entropy"] /= r["tokens"]
    return [rows[k] for k in sorted(rows)]
