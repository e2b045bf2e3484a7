"""Video tasks: synthetic motion and frame order, frame order from a video directory, NExT-QA
multiple choice and temporal grounding rows (on generated video directories)."""

import json
from collections import Counter

import numpy as np
import pytest

from mmrlvr.data.io import DataError

from mmrlvr.data.media import decode_video
from mmrlvr.tasks import load_task
from mmrlvr.verifiers.base import resolve_verifier as get_verifier


def _write_clip(path, frames=20, fps=10.0, size=64):
    """An mp4 whose brightness rises frame by frame (so any segment tells its time)."""
    import cv2

    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (size, size))
    for t in range(frames):
        w.write(np.full((size, size, 3), 10 + t * (240 // frames), np.uint8))
    w.release()
    return path


def _red_centroid(frame):
    r, g, b = (frame[..., i].astype(int) for i in range(3))
    ys, xs = np.nonzero((r > 180) & (g < 80) & (b < 80))
    return ys.mean(), xs.mean()


def test_motion_clips_move_the_way_the_reference_says():
    train = load_task("video_motion", "train", 400, seed=0)
    held = load_task("video_motion", "eval", 64, seed=0)
    assert {s.videos[0] for s in held}.isdisjoint({s.videos[0] for s in train})
    assert [s.id for s in load_task("video_motion", "eval", 64, seed=0)] == [s.id for s in held]
    assert set(Counter(s.meta["direction"] for s in train)) == {"left", "right", "up", "down"}
    for s in train[:40]:
        frames, meta = decode_video(s.videos[0])
        assert frames.shape == (4, 56, 56, 3) and meta["sampled_fps"] == 2.0
        (y0, x0), (y1, x1) = _red_centroid(frames[0]), _red_centroid(frames[-1])
        want = {"left": x1 < x0, "right": x1 > x0, "up": y1 < y0, "down": y1 > y0}[s.meta["direction"]]
        assert want, s.videos[0]
        assert get_verifier("choice")(f"<answer>{s.meta['direction']}</answer>", s).score == 1.0
    # the flawed teacher: "up" clips answered "down" about 70% of the time, nothing else wrong
    up = [s for s in train if s.meta["direction"] == "up"]
    wrong = sum(s.meta["teacher"] != "up" for s in up) / len(up)
    assert 0.55 < wrong < 0.85
    assert all(s.meta["teacher"] == s.meta["direction"] for s in train if s.meta["direction"] != "up")


def _fill(frames):  # coloured (non-background) pixels in the last frame of a segment
    return int((np.abs(frames[-1].astype(int) - 235).sum(-1) > 30).sum())


def test_synthetic_frame_order_reference_is_the_true_order():
    samples = load_task("frame_order", "train", 30, seed=1, k=4)
    verifier = get_verifier("order")
    for s in samples:
        labels = "ABCD"
        fills = {labels[i]: _fill(decode_video(v)[0]) for i, v in enumerate(s.videos)}
        assert [fills[x] for x in s.reference] == sorted(fills.values())  # the bar grows with time
        assert s.reference != list(labels)  # always shown shuffled
        assert verifier(s.target, s).score == 1.0


def test_frame_order_from_a_directory_of_videos(tmp_path):
    for i in range(6):
        _write_clip(tmp_path / f"clip{i}.mp4")
    train = load_task("frame_order", "train", 12, seed=0, video_dir=str(tmp_path), holdout_frac=0.3)
    held = load_task("frame_order", "eval", 4, seed=0, video_dir=str(tmp_path), holdout_frac=0.3)
    assert {s.meta["source"] for s in train}.isdisjoint({s.meta["source"] for s in held})
    for s in train[:4]:
        # each segment is a lazy VideoRef into its third of the 2 s clip
        means = {"ABC"[i]: decode_video(v)[0].mean() for i, v in enumerate(s.videos)}
        assert [means[x] for x in s.reference] == sorted(means.values())
        assert [v.start for v in sorted(s.videos, key=lambda v: v.start)] == pytest.approx([0, 2 / 3, 4 / 3])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty: no video files"):
        load_task("frame_order", "train", 2, seed=0, video_dir=str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="none: not a directory"):
        load_task("frame_order", "train", 2, seed=0, video_dir=str(tmp_path / "none"))


def _nextqa_rows(shared_data):
    path = shared_data / "video_qa_nextqa" / "val_temporal_sample.jsonl"
    return path, [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_nextqa_with_a_generated_video_directory(shared_data, tmp_path):
    ann, rows = _nextqa_rows(shared_data)
    for row in rows[:12]:
        sub = tmp_path / "videos" / str(row["video"])[:2]  # nested, as NExT-QA stores them
        sub.mkdir(parents=True, exist_ok=True)
        _write_clip(sub / f"{row['video']}.mp4")
    args = {"video_dir": str(tmp_path / "videos"), "data": str(ann), "skip_missing": True, "holdout_frac": 0.0}
    samples = load_task("nextqa", "train", 100, seed=0, **args)
    assert len(samples) == len([r for r in rows if str(r["video"]) in {str(x["video"]) for x in rows[:12]}])
    s, row = samples[0], rows[0]
    assert s.reference == "ABCDE"[int(row["answer"])] and s.meta["options"][0] == row["a0"]
    assert s.videos[0].path.endswith(f"{row['video']}.mp4") and s.meta["type"] == row["type"]
    assert get_verifier("choice")(f"<answer>{s.reference}</answer>", s).score == 1.0
    assert get_verifier("choice")(f"<answer>{row['a' + row['answer']]}</answer>", s).score == 1.0
    # without skip_missing a missing video is a bad row: 100 rows - 13 with one of the 12 written videos
    # = 87 bad rows stop the build, naming the first (row 12)
    with pytest.raises(DataError, match=r"val_temporal_sample\.jsonl: 87 of 100 rows are bad .*first: row 12: video '\d+' not found"):
        load_task("nextqa", "train", 100, seed=0, **{**args, "skip_missing": False})
    # NExT-QA's own CSV layout gives the same samples
    import csv

    keys = ["video", "frame_count", "width", "height", "question", "answer", "qid", "type", *[f"a{i}" for i in range(5)]]
    with open(tmp_path / "val.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    from_csv = load_task("nextqa", "train", 100, seed=0, **{**args, "data": str(tmp_path / "val.csv")})
    assert [(s.reference, s.meta["options"]) for s in from_csv] == [(s.reference, s.meta["options"]) for s in samples]


def test_temporal_grounding_rows(tmp_path):
    _write_clip(tmp_path / "a.mp4", frames=40)  # 4 s at 10 fps
    rows = [{"video": "a.mp4", "query": "it gets bright", "timestamp": [2.0, 3.5]},
            {"video": "a.mp4", "sentence": "it starts", "timestamp": [0, 1]}]
    ann = tmp_path / "ground.jsonl"
    ann.write_text("\n".join(json.dumps(r) for r in rows))
    samples = load_task("temporal_grounding", "train", 10, seed=0, data=str(ann), holdout_frac=0.0)
    assert [s.reference for s in samples] == [[2.0, 3.5], [0.0, 1.0]]
    frames, meta = samples[0].videos[0].load()
    assert len(frames) == 8 and meta["sampled_fps"] == pytest.approx(2.0)  # 4 s at 2 fps
    tiou = get_verifier("tiou")
    assert tiou("<answer>[2.0, 3.5]</answer>", samples[0]).score == 1.0
    # [2, 3] against [2, 3.5]: overlap 1 s, union 1.5 s -> 0.667
    assert tiou("<answer>[2, 3]</answer>", samples[0]).score == pytest.approx(2 / 3)
    ann.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "timestamp": [3, 1]}))
    with pytest.raises(DataError, match=r"ground\.jsonl: 1 of 2 rows are bad \(more than max_bad_frac=0\); first: row 1: timestamp must be"):
        load_task("temporal_grounding", "train", 10, seed=0, data=str(ann), holdout_frac=0.0, max_bad_frac=0)
