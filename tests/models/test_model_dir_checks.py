"""A model directory that is not complete (config, weights, tokenizer) is refused naming what is
missing, before anything loads; a model.path that is neither a directory, a tiny name nor an
owner/name hub id says so without trying the network."""

import json
import shutil

import pytest

from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors


def _model_line(path):
    errors = [e for e in config_errors(load_config("configs/quickstart.yaml", [f"model.path={path}"]))
              if e.startswith("model.path=")]
    assert len(errors) <= 1
    return errors[0] if errors else None


def _break(d, how):
    if how == "no config":
        (d / "config.json").unlink()
    elif how == "malformed config":
        (d / "config.json").write_text('{"model_type": "qwen2_5_vl",')
    elif how == "truncated weights":
        w = d / "model.safetensors"
        w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    elif how == "no weights":
        (d / "model.safetensors").unlink()
    elif how == "no tokenizer":
        (d / "tokenizer.json").unlink()
        (d / "tokenizer_config.json").unlink()
    elif how == "index names a missing shard":
        (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
        (d / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))


@pytest.mark.parametrize("how, says", [
    ("no config", "with a config.json"), ("malformed config", "is not readable JSON"),
    ("truncated weights", "model.safetensors is not a complete safetensors file"),
    ("no weights", "with weights"), ("no tokenizer", "with a tokenizer"),
    ("index names a missing shard", "names model-00002-of-00002.safetensors"),
])
def test_an_incomplete_model_directory_is_one_line(tiny_dir, tmp_path, how, says):
    d = tmp_path / "model"
    shutil.copytree(tiny_dir, d)
    assert _model_line(d) is None
    _break(d, how)
    line = _model_line(d)
    assert line is not None and says in line, line


def test_a_typo_of_tiny_is_not_tried_on_the_hub():
    line = _model_line("TINY")
    assert "no such directory (did you mean 'tiny'?)" in line
    assert _model_line("Qwen/Qwen2.5-VL-3B-Instruct") is None  # owner/name: transformers finds it (cache or hub)


@pytest.mark.parametrize("key, value", [("max_pixels", 50_000), ("min_pixels", 3_136)])
def test_one_pixel_bound_alone_keeps_the_others_default_and_images_encode(key, value):
    """The image processor takes both bounds or neither: `model.max_pixels` alone once broke every
    image after the model loaded."""
    from PIL import Image

    from mmrlvr.config import ModelConfig
    from mmrlvr.models.load import load_policy

    _, default = load_policy("tiny")
    _, proc = load_policy(ModelConfig(path="tiny", **{key: value}))
    want = dict(default.image_processor.size)
    want["longest_edge" if key == "max_pixels" else "shortest_edge"] = value
    assert dict(proc.image_processor.size) == want
    out = proc.image_processor(images=[Image.new("RGB", (320, 240), "white")], return_tensors="pt")
    assert out["pixel_values"].shape[0] > 0
