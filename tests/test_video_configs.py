"""The video configs load and pass validation (the 3B one up to its hub model and video_dir)."""

import pytest

from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors


@pytest.mark.parametrize("name", ["video_motion_tiny", "video_motion_contrast_tiny"])
def test_tiny_video_configs_are_valid(name, tmp_path):
    cfg = load_config(f"configs/{name}.yaml", [f"output_dir={tmp_path}"])
    assert config_errors(cfg) == []
    assert cfg.temporal_contrast.enabled == name.endswith("contrast_tiny")


def test_qwen3b_video_config(tmp_path):
    cfg = load_config("configs/video_qwen2.5vl_3b.yaml", [f"output_dir={tmp_path}", f"task.args.video_dir={tmp_path}"])
    assert cfg.model.video_max_frames == 16 and cfg.task.args["nframes"] == 16
    tc = cfg.temporal_contrast
    assert (tc.enabled, tc.method, tc.alpha, tc.mu) == (True, "tgrpo", 0.3, 1.0)
    assert config_errors(cfg) == []
