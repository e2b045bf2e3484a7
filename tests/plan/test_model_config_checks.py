"""A malformed model config is one line, from validation and from `mmrlvr plan`, before anything is built
from it, and a config whose counts would make the meta-device build run for minutes (a vision depth of a
million) is refused by its numbers: the plan answers in bounded time for any config.json."""

from __future__ import annotations

import json
import shutil

import pytest

from mmrlvr.cli import main
from mmrlvr.models.config_checks import model_config_problems
from mmrlvr.models.tiny import ensure_tiny
from mmrlvr.plan.shape import SHIPPED

CONFIG = "configs/geometry_qwen2_5_vl_3b.yaml"
BASE = json.loads((SHIPPED / "Qwen2.5-VL-3B-Instruct.json").read_text())
VISION = BASE["vision_config"]
CASES = {
    "zero heads": ({**BASE, "num_attention_heads": 0}, "num_attention_heads=0: expected an integer in [1, 1048576]"),
    "negative hidden size": ({**BASE, "hidden_size": -5}, "hidden_size=-5: expected an integer in [1, 1048576]"),
    "string hidden size": ({**BASE, "hidden_size": "big"}, 'hidden_size="big": expected an integer'),
    "a text-only type": ({**BASE, "model_type": "llama"}, "model_type='llama' has no image-text-to-text model"),
    "an unknown type": ({**BASE, "model_type": "zzz"}, "model_type='zzz' has no image-text-to-text model"),
    "no type": ({k: v for k, v in BASE.items() if k != "model_type"}, "model_type is missing"),
    "patch size 0": ({**BASE, "vision_config": {**VISION, "patch_size": 0}}, "vision_config.patch_size=0: expected"),
    "vision depth 1e6": ({**BASE, "vision_config": {**VISION, "depth": 10**6}},
                         "vision_config.depth=1000000: expected an integer in [1, 1024]"),
    "a JSON list": ([1, 2], "expected a JSON object, got list"),
    "heads that do not divide": ({**BASE, "hidden_size": 2050}, "hidden_size=2050 is not a multiple of"),
}


def _model_dir(tmp_path, config) -> str:
    """A complete model directory (the tiny model's weights and tokenizer) with `config` as its config.json."""
    d = tmp_path / "model"
    shutil.copytree(ensure_tiny(), d)
    (d / "config.json").write_text(json.dumps(config))
    return str(d)


@pytest.mark.parametrize("name", CASES)
def test_plan_names_the_problem_in_one_line(name, tmp_path, capsys):
    config, expected = CASES[name]
    path = _model_dir(tmp_path, config)
    assert main(["plan", CONFIG, f"model.path={path}", "rollout.generate_max_rows=8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # one line for the config (a zero head count also makes the KV-cache bound's own line)
    mine = [line for line in err if line.startswith(f"mmrlvr: error: model.path={path!r}: {path}/config.json: ")]
    assert len(mine) == 1 and expected in mine[0], err
    assert "Traceback" not in "\n".join(err) and sum(line.startswith("mmrlvr: error: ") for line in err) <= 2


def test_a_bad_preprocessor_config_is_one_line(tmp_path, capsys):
    path = _model_dir(tmp_path, BASE)
    pre = tmp_path / "model" / "preprocessor_config.json"
    for text, expected in (("{not json", "not readable JSON"), ('{"size": {"longest_edge": "x"}}',
                                                                 'the image size bound "x" is not a positive integer')):
        pre.write_text(text)
        assert main(["plan", CONFIG, f"model.path={path}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"mmrlvr: error: {pre}: ") and expected in err[0], err


def test_every_shipped_and_tiny_config_passes():
    for file in SHIPPED.glob("*.json"):
        assert model_config_problems(json.loads(file.read_text())) == [], file
    assert model_config_problems(json.loads((ensure_tiny() / "config.json").read_text())) == []
