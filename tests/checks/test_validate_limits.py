"""Bounds that contradict each other, and fractions a NaN would switch off, stop before the model loads."""

from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors


def test_min_above_max_and_nan_fractions():
    cfg = load_config(None, ["model.min_pixels=5000", "model.max_pixels=4000", "model.video_min_pixels=10",
                             "model.video_max_pixels=20", "task.name=geometry", "task.args.max_bad_frac=.nan"])
    errors = config_errors(cfg)
    assert "model.min_pixels=5000: at most model.max_pixels (4000)" in errors
    assert "task.args.max_bad_frac=nan: a fraction in [0, 1]" in errors
    assert not any(e.startswith("model.video_min_pixels") for e in errors)  # 10 <= 20 is fine
    ok = load_config(None, ["model.min_pixels=4000", "model.max_pixels=4000", "task.name=geometry",
                            "task.args.max_bad_frac=1.0"])
    assert not [e for e in config_errors(ok) if "pixels" in e or "max_bad_frac" in e]


def test_a_huge_value_is_cut_in_the_error_line():
    cfg = load_config(None, ["task.name=geometry", "task.args.nope=" + "x" * 5000])
    line = next(e for e in config_errors(cfg) if e.startswith("task.args.nope="))
    assert len(line) < 400
