import json

import numpy as np
import pytest
from PIL import Image

from mmrlvr.viz.curves import expand_metrics, plot_curves, read_metrics, series, smooth
from mmrlvr.viz.figure import save_figure


def _run(path, rows):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_read_metrics_names_the_bad_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1, "reward/mean": 0.5}\n{"step": 2, oops}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
        read_metrics(p)
    p.write_text('{"reward/mean": 0.5}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: expected an object with a numeric 'step'"):
        read_metrics(tmp_path)


def test_series_keeps_the_last_value_per_step_and_skips_missing():
    rows = [{"step": 2, "r": 0.5}, {"step": 1, "r": 0.1}, {"step": 3}, {"step": 2, "r": 0.7}]
    x, y = series(rows, "r")
    np.testing.assert_array_equal(x, [1, 2])
    np.testing.assert_array_equal(y, [0.1, 0.7])


def test_smooth_and_expand_by_hand():
    np.testing.assert_allclose(smooth(np.array([1.0, 2.0, 3.0, 4.0]), 2), [1.0, 1.5, 2.5, 3.5])
    runs = {"a": [{"step": 1, "actor/clip_frac_low": 0, "actor/clip_frac_high": 0, "eval/count/accuracy": 1}],
            "b": [{"step": 1, "reward/mean": 0, "eval/video/accuracy": 1}]}
    assert expand_metrics(["reward/mean", "eval/*/accuracy", "actor/clip_frac*", "loss/kl"], runs) == [
        "reward/mean", "eval/count/accuracy", "eval/video/accuracy", "actor/clip_frac_high", "actor/clip_frac_low"]


def test_two_runs_on_one_figure(tmp_path):
    a = _run(tmp_path / "grpo", [{"step": s, "reward/mean": s / 10, "loss/kl": 0.01} for s in range(1, 21)]
             + [{"step": 20, "eval/counting/accuracy": 0.9}])
    b = _run(tmp_path / "dapo", [{"step": s, "reward/mean": s / 20, "actor/entropy": 1.0} for s in range(1, 21)])
    fig = plot_curves([a, b], window=4)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["reward/mean", "eval/counting/accuracy", "loss/kl", "actor/entropy"]
    reward_ax = fig.axes[0]
    labelled = {line.get_label(): line for line in reward_ax.get_lines() if not line.get_label().startswith("_")}
    assert sorted(labelled) == ["dapo", "grpo"]
    # the labelled line is the 4-point trailing mean: at step 20 (0.17 + 0.18 + 0.19 + 0.20) / 4 * 10 / 10
    assert labelled["grpo"].get_ydata()[-1] == pytest.approx((1.7 + 1.8 + 1.9 + 2.0) / 4)
    path = save_figure(fig, tmp_path / "curves.png")
    with Image.open(path) as png:
        assert png.format == "PNG" and png.size[0] >= 3 * 3.6 * 100


def test_no_matching_metric_is_an_error(tmp_path):
    a = _run(tmp_path / "a", [{"step": 1, "x": 1}])
    with pytest.raises(ValueError, match="none of"):
        plot_curves(a, metrics=["reward/mean"])


def test_image_grid_shows_images_as_samples_hold_them(tmp_path):
    """PNG bytes (synthetic tasks), a path and a PIL image are all decoded onto the grid."""
    import io

    from mmrlvr.viz.figure import image_grid

    red = Image.new("RGB", (8, 6), (255, 0, 0))
    buf = io.BytesIO()
    red.save(buf, format="PNG")
    red.save(tmp_path / "red.png")
    fig = image_grid([buf.getvalue(), str(tmp_path / "red.png"), red], ["bytes", "path", "pil"], ncols=3)
    shown = [ax.get_images()[0].get_array() for ax in fig.axes[:3]]
    assert all(np.asarray(a).shape == (6, 8, 3) and (np.asarray(a)[..., 0] == 255).all() for a in shown)
    assert save_figure(fig, tmp_path / "grid.png").exists()


def test_unit_range_metrics_get_a_fixed_axis_and_others_auto(tmp_path):
    # a 4-step reward that wobbles by 0.02 must not fill the panel: 0-1 axis; a loss stays auto-scaled
    rows = [{"step": s, "reward/mean": 0.50 + 0.01 * (s % 2), "loss/policy": 3.0 + s, "eval/geometry/accuracy": 0.25}
            for s in range(1, 5)]
    fig = plot_curves({"r": rows}, metrics=["reward/mean", "loss/policy", "eval/*/accuracy"])
    lims = {ax.get_title(): ax.get_ylim() for ax in fig.axes if ax.get_title()}
    assert lims["reward/mean"] == (-0.03, 1.03) and lims["eval/geometry/accuracy"] == (-0.03, 1.03)
    assert lims["loss/policy"][0] > 3.0  # auto: around 4..7, not pinned to 0-1
    weighted = [{"step": 1, "reward/mean": 1.6}]  # two reward terms can sum above 1: auto
    fig = plot_curves({"r": weighted}, metrics=["reward/mean"])
    assert fig.axes[0].get_ylim() != (-0.03, 1.03)
