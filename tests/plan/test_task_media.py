"""The memory plan sizes a prompt by the media its task declares (`MEDIA`), not by a list of task
names of its own: every task declares its media, the samples it builds agree, and a task whose rows may
hold either (generic) is planned at the larger of its image and video prompts."""

from __future__ import annotations

import dataclasses

import pytest

from mmrlvr.config import load_config
from mmrlvr.plan.memory import task_media, visual_tokens
from mmrlvr.plan.shape import model_shape
from mmrlvr.tasks import load_task, task_module
from mmrlvr.tasks._catalogue import task_names


@pytest.mark.parametrize("name", task_names())
def test_every_task_declares_the_media_its_samples_carry(name):
    module = task_module(name)
    assert set(getattr(module, "MEDIA", ())) <= {"image", "video"} and module.MEDIA, f"{name} declares no MEDIA"
    try:
        samples = load_task(name, "train", 3, 0)
    except Exception:  # noqa: BLE001 - a task that reads a data file: its declaration is read, not built
        pytest.skip(f"{name} needs a data file")
    carried = {kind for s in samples for kind, refs in (("image", s.images), ("video", s.videos)) if refs}
    assert carried and carried <= set(module.MEDIA)


def test_a_video_task_is_planned_by_its_frames_and_generic_by_its_columns():
    shape = model_shape("Qwen/Qwen2.5-VL-3B-Instruct")  # 28 x 28 pixels a visual token, 2 frames a temporal patch
    cfg = load_config(None, ["model.path=Qwen/Qwen2.5-VL-3B-Instruct", "model.max_pixels=200704",
                             "model.video_max_frames=16", "model.video_max_pixels=100352"])
    image, video = 200704 // 784, 16 // 2 * (100352 // 784)  # 256 and 8 x 128 = 1024
    assert visual_tokens(cfg, shape) == image  # the default task, counting: images
    for name, args, expected in (("video_motion", {}, video), ("nextqa", {}, video), ("generic", {}, image),
                                 ("generic", {"columns": {"video": "clip"}}, video),
                                 ("generic", {"video_dir": "clips"}, video),
                                 ("generic", {"columns": {"image": "photo", "video": "clip"}}, max(image, video))):
        cfg = dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, name=name, args=args))
        assert visual_tokens(cfg, shape) == expected, (name, args)
    assert task_media("no_such_task") == ("image",)
