"""Regenerate the PNGs in docs/figures/ from short runs of the embedded tiny model (CPU: 6.4 minutes on a shared 2-core VM).

    python docs/make_figures.py [--out docs/figures] [--work runs/docs-figures]

Two runs, drawn with `mmrlvr.viz` (nothing is drawn by hand):
- counting (configs/quickstart.yaml, shortened): `curves.png` (reward, share of mixed groups and
  held-out accuracy per step), `token_roles.png` (one logging step's completions token by token:
  perception/reasoning labels and weights) and `attention.png` (attention of the answer's tokens
  to the board, from the run's last checkpoint);
- grounding (configs/grounding_tiny.yaml, warm start only): `boxes.png` (the model's greedy boxes,
  red, against the references, green, labelled with the `iou` verifier's IoU).
Each PNG is checked to be under 200 KB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 200_000  # bytes per PNG


def _train(config: str, out: Path, overrides: list[str]) -> Path:
    from mmrlvr.config import load_config
    from mmrlvr.recipe.loop import train

    cfg = load_config(ROOT / config, [f"output_dir={out}", "train.resume=false", *overrides])
    train(cfg)
    return out


def counting_figures(work: Path, figures: Path) -> list[Path]:
    from mmrlvr.viz.curves import plot_curves
    from mmrlvr.viz.figure import save_figure

    run = _train("configs/quickstart.yaml", work / "counting",
                 ["train.steps=40", "train.log_every=10", "train.save_every=0", "train.eval_every=10",
                  "task.eval_size=128", "token_weighting.method=tor"])
    fig = plot_curves({"quickstart (40 RL steps)": run},
                      metrics=["reward/mean", "rollout/mixed_group_frac", "eval/*/accuracy"], window=5,
                      title="tiny Qwen2.5-VL counting red shapes: GRPO after a flawed warm start")
    png = save_figure(fig, figures / "curves.png", dpi=90)
    return [png, figure_numbers(run, Path(png)), token_roles_figure(run, figures), attention_figure(run, figures)]


def figure_numbers(run: Path, png: Path) -> Path:
    """What `png` shows, as numbers, beside it (NAME.json): its sha256 and held-out accuracy per
    evaluated step. A page that quotes accuracy beside the figure is checked against this record
    (docs/figure_numbers.py), so a figure left over from an older run cannot sit beside newer numbers."""
    import hashlib

    points = []
    for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        acc = [v for k, v in row.items() if k.startswith("eval/") and k.endswith("/accuracy")]
        if acc:
            points.append([row["step"], round(acc[0], 3)])
    out = png.with_suffix(".json")
    out.write_text(json.dumps({"figure": png.name, "png_sha256": hashlib.sha256(png.read_bytes()).hexdigest(),
                               "run": "configs/quickstart.yaml, 40 RL steps, 128 held-out prompts",
                               "eval_accuracy": points}) + "\n")
    return out


def attention_figure(run: Path, figures: Path) -> Path:
    """Where the trained model looks on a held-out board while it writes the right count: attention
    of each token of `<answer>N</answer>` to the image, read from its last checkpoint."""
    from mmrlvr.config import load_config
    from mmrlvr.models.load import load_checkpoint
    from mmrlvr.tasks import load_task
    from mmrlvr.train.checkpoint import latest_checkpoint
    from mmrlvr.train.setup import task_args
    from mmrlvr.viz.attention import token_attention
    from mmrlvr.viz.figure import save_figure
    from mmrlvr.viz.heatmap import plot_image_attention

    cfg = load_config(run / "config.yaml")
    model, processor = load_checkpoint(str(latest_checkpoint(run)), cfg.model)
    sample = next(s for s in load_task(cfg.task.name, "eval", 16, cfg.seed, **task_args(cfg)) if int(s.reference) >= 3)
    result = token_attention(model, processor, sample, f"<answer>{sample.reference}</answer>")
    fig = plot_image_attention(sample.images[0], result, max_tokens=6,
                               title=f"attention to the board while writing <answer>{sample.reference}</answer> "
                                     f"({sample.reference} red shapes), trained tiny model")
    return save_figure(fig, figures / "attention.png", dpi=80)


def token_roles_figure(run: Path, figures: Path) -> Path:
    """The newest logging step's completions, one per distinct text (up to 3), token by token."""
    from mmrlvr.viz.figure import save_figure
    from mmrlvr.viz.tokens import plot_token_roles, read_token_roles

    records, seen = [], set()
    for rec in read_token_roles(run, step=None):
        if tuple(rec["tokens"]) not in seen:
            seen.add(tuple(rec["tokens"]))
            records.append(rec)
    fig = plot_token_roles(records[:3], title="token roles (tor weighting): label = colour, weight = shade")
    return save_figure(fig, figures / "token_roles.png", dpi=110)


def boxes_figure(work: Path, figures: Path) -> list[Path]:
    from mmrlvr.config import load_config
    from mmrlvr.tasks import load_task
    from mmrlvr.recipe.eval_cli import run_eval
    from mmrlvr.train.setup import task_args
    from mmrlvr.viz.boxes import plot_grounding
    from mmrlvr.viz.figure import save_figure

    overrides = ["train.steps=1", "train.save_every=1", "task.eval_size=8", "rollout.prompts_per_step=2"]
    run = _train("configs/grounding_tiny.yaml", work / "grounding", overrides)
    cfg = load_config(ROOT / "configs/grounding_tiny.yaml", [f"output_dir={run}", *overrides])
    report = run_eval(cfg, str(run / "checkpoints" / "step_1"))
    samples = {s.id: s for s in load_task(cfg.task.name, "eval", cfg.task.eval_size, cfg.seed, **task_args(cfg))}
    items = [(samples[e["id"]].images[0], e["completion"], samples[e["id"]].reference, samples[e["id"]].meta)
             for e in report["examples"][:4]]
    fig = plot_grounding(items, title="tiny model after a 300-step warm start: green reference, red prediction")
    return [save_figure(fig, figures / "boxes.png", dpi=90)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "figures"))
    parser.add_argument("--work", default=str(ROOT / "runs" / "docs-figures"))
    parser.add_argument("--only", choices=["counting", "boxes"], help="regenerate one group")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    figures, work = Path(args.out), Path(args.work)
    figures.mkdir(parents=True, exist_ok=True)
    paths = []
    if args.only in (None, "counting"):
        paths += counting_figures(work, figures)
    if args.only in (None, "boxes"):
        paths += boxes_figure(work, figures)
    sizes = {p.name: p.stat().st_size for p in map(Path, paths)}
    print(json.dumps(sizes, indent=1))
    big = [n for n, s in sizes.items() if s > LIMIT]
    if big:
        print(f"make_figures: over {LIMIT} bytes: {', '.join(big)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.exit(main())
