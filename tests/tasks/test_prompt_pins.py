"""The shipped prompts of the synthetic and video tasks, pinned byte for byte.

The hashes were taken from the prompts these tasks built before they took `prompt_template` and
`system_prompt`: with neither set, the messages (every turn, every text and media slot, in order)
must stay exactly as they were.
"""

import hashlib
import json

import pytest

from mmrlvr.tasks import load_task


def _digest(samples) -> str:
    """sha256 of the messages of each sample, one JSON line each (the chat template's whole input)."""
    text = "\n".join(json.dumps(s.messages, sort_keys=True) for s in samples)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _clip(path, frames=20, size=32):
    import cv2
    import numpy as np

    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (size, size))
    for t in range(frames):
        w.write(np.full((size, size, 3), 10 + t * 10, np.uint8))
    w.release()


SYNTHETIC = {  # task: (build args, sha256 prefix of the shipped prompts)
    "counting": ({"max_red": 4}, "ee7983f44e020467"),
    "marked_cell": ({"grid": 5, "min_shapes": 6, "max_shapes": 9}, "814ed5b863b07c17"),
    "cell_tally": ({"grid": 3}, "67cbf0d1a2c94fd0"),
    "video_motion": ({"frames": 6}, "26c0b1e27bddbf4e"),
    "frame_order": ({"k": 4}, "7b9cc8a760ac96ac"),
}


@pytest.mark.parametrize("task", sorted(SYNTHETIC))
def test_shipped_synthetic_prompts_are_unchanged(task):
    args, pin = SYNTHETIC[task]
    samples = load_task(task, "train", 3, seed=5, eval_size=4, **args) + load_task(task, "eval", 2, seed=5, eval_size=4, **args)
    assert _digest(samples) == pin


def test_shipped_video_row_prompts_are_unchanged(shared_data, tmp_path):
    rows = [json.loads(x) for x in (shared_data / "video_qa_nextqa" / "val_temporal_sample.jsonl").read_text().splitlines()[:3]]
    for row in rows:
        _clip(tmp_path / f"{row['video']}.mp4")
    nextqa = load_task("nextqa", "train", 3, seed=0, video_dir=str(tmp_path), data=str(shared_data / "video_qa_nextqa" / "val_temporal_sample.jsonl"),
                       skip_missing=True, holdout_frac=0.0)
    ground_rows = [{"video": f"{rows[0]['video']}.mp4", "query": "it gets bright", "timestamp": [0.5, 1.5]},
                   {"video": f"{rows[1]['video']}.mp4", "sentence": "  the clip starts ", "timestamp": [0, 1]}]
    (tmp_path / "g.jsonl").write_text("\n".join(json.dumps(r) for r in ground_rows))
    grounding = load_task("temporal_grounding", "train", 2, seed=0, data=str(tmp_path / "g.jsonl"), holdout_frac=0.0)
    assert (_digest(nextqa), _digest(grounding)) == ("19ac74bf50c1f051", "84003dfb520796d2")
