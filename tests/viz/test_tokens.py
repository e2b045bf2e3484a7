import json

import numpy as np
import pytest
from PIL import Image

from mmrlvr.viz.figure import save_figure
from mmrlvr.viz.tokens import (
    MIN_SHADE, ROLE_COLORS, plot_token_roles, read_token_roles, role_summary, token_color, token_roles_path,
    tokens_html,
)


def _record(**kw):
    rec = {
        "step": 3, "sample_id": "s0", "row": 0, "reward": 1.0, "advantage": 0.5,
        "tokens": ["<answer>", "Ġ3", "Ċ", "</answer>"], "token_ids": [5, 6, 7, 8],
        "signals": {"entropy": [0.1, 2.0, 0.3, 0.05], "visual_dependency": [0.0, 0.9, 0.1, 0.0]},
        "labels": ["other", "perception", "reasoning", "both"], "weights": [0.5, 2.0, 1.0, 0.5], "method": "test",
    }
    rec.update(kw)
    return rec


def test_token_color_by_role_and_weight():
    assert token_color("perception", 2.0, 2.0) == ROLE_COLORS["perception"] == (0, 114, 178)
    # weight 0 keeps MIN_SHADE of the hue: 255 - 0.15 * (255 - c) -> (216.75, 233.6, 243.45) rounded
    assert token_color("perception", 0.0, 2.0) == (217, 234, 243)
    # half the top weight: share 0.15 + 0.85 * 0.5 = 0.575 of (230, 159, 0):
    # 255 - 0.575 * 25 = 240.6, 255 - 0.575 * 96 = 199.8, 255 - 0.575 * 255 = 108.4
    assert token_color("reasoning", 1.0, 2.0) == (241, 200, 108)
    assert token_color("other", 5.0, 2.0) == ROLE_COLORS["other"]  # clipped at the top
    assert MIN_SHADE == 0.15


def test_html_colours_each_token_by_role_and_escapes_text():
    rec = _record(tokens=["<b>", "Ġ3", "Ċ", "x"])
    out = tokens_html(rec)
    assert "&lt;b&gt;" in out
    for lab, w in zip(rec["labels"], rec["weights"]):
        assert f"rgb{token_color(lab, w, 2.0)}" in out
    assert "perception, weight 2.000, entropy 2.000, visual_dependency 0.900" in out
    assert "\u21b5" in out and "> 3<" in out  # newline and byte-level space made visible
    assert "method test" in out and "advantage +0.500" in out


def test_png_has_each_role_colour(tmp_path):
    rec = _record(weights=[1.0, 1.0, 1.0, 1.0], tokens=["aaaa", "bbbb", "cccc", "dddd"])
    path = save_figure(plot_token_roles([rec, _record(method="uniform")]), tmp_path / "roles.png")
    with Image.open(path) as png:
        assert png.format == "PNG"
        arr = np.asarray(png.convert("RGB")).astype(int)
    for role, color in ROLE_COLORS.items():  # every token at the top weight shows its full role colour
        assert (np.abs(arr - color).sum(-1) <= 3).sum() > 50, role


def test_read_token_roles_validates_and_finds_the_newest_step(tmp_path):
    folder = tmp_path / "run" / "token_roles"
    folder.mkdir(parents=True)
    (folder / "step_2.jsonl").write_text(json.dumps(_record(step=2)) + "\n")
    (folder / "step_10.jsonl").write_text(json.dumps(_record(step=10)) + "\n\n" + json.dumps(_record(step=10)) + "\n")
    assert token_roles_path(tmp_path / "run") == folder / "step_10.jsonl"  # numeric, not lexical
    assert [r["step"] for r in read_token_roles(tmp_path / "run")] == [10, 10]
    assert read_token_roles(tmp_path / "run", step=2)[0]["step"] == 2
    bad = folder / "step_11.jsonl"
    bad.write_text(json.dumps(_record()) + "\n" + json.dumps(_record(labels=["other", "vision", "both", "both"])) + "\n")
    with pytest.raises(ValueError, match=r"step_11.jsonl:2: unknown labels \['vision'\]"):
        read_token_roles(bad)
    bad.write_text(json.dumps(_record(weights=[1.0])) + "\n")
    with pytest.raises(ValueError, match=r"step_11.jsonl:1: 1 weights for 4 tokens"):
        read_token_roles(bad)
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"step_11.jsonl:1: not valid JSON"):
        read_token_roles(bad)
    with pytest.raises(FileNotFoundError, match="no token_roles"):
        token_roles_path(tmp_path)


def test_role_summary_by_hand():
    recs = [_record(), _record(labels=["perception"] * 4, weights=[1.0, 1.0, 3.0, 3.0])]
    s = role_summary(recs)
    # 8 tokens: perception 1 + 4 = 5 (weights 2 + 8 = 10 -> mean 2), reasoning 1, both 1, other 1
    assert s["perception"] == {"share": 5 / 8, "mean_weight": 2.0}
    assert s["other"] == {"share": 1 / 8, "mean_weight": 0.5}


def test_png_writes_each_weight_under_its_token():
    fig = plot_token_roles(_record())  # weights 0.5, 2.0, 1.0, 0.5
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert [t for t in texts if t in ("0.50", "2.00", "1.00")] == ["0.50", "2.00", "1.00", "0.50"]
    assert " 3" in texts and "\u21b5" in texts  # byte-level space and newline made visible
    fig = plot_token_roles(_record(), show_weights=False)
    assert "2.00" not in [t.get_text() for t in fig.axes[0].texts]


def test_step_table_groups_a_kawhi_record_by_step():
    from mmrlvr.viz.tokens import step_table

    rec = {"tokens": ["Row", " red.", " So", " 2."], "weights": [1.5, 1.5, 0.5, 0.5],
           "signals": {"step_ids": [0, 0, 1, 1], "region_attention": [0.2, 0.4, 0.0, 0.1], "entropy": [1.0, 3.0, 0.5, 0.5]}}
    got = step_table(rec)
    assert [r["text"] for r in got] == ["Row red.", " So 2."]
    assert [r["tokens"] for r in got] == [2, 2] and [r["weight"] for r in got] == [1.5, 0.5]
    assert [round(r["region_attention"], 6) for r in got] == [0.3, 0.05]
    assert [r["entropy"] for r in got] == [2.0, 0.5]
    import pytest

    with pytest.raises(KeyError, match="step_ids"):
        step_table({"tokens": [], "weights": [], "signals": {}})
