"""Bad media in a batch: named, dropped, counted; the run stops only past the fraction."""

import io
import logging

import pytest
from PIL import Image

from mmrlvr.data.feed import BadMediaError, MediaStream, decode_samples
from mmrlvr.data.sources import SeededStream
from mmrlvr.types import Sample


def _png(c):
    buf = io.BytesIO()
    Image.new("RGB", (28, 28), (c, 0, 0)).save(buf, format="PNG")
    return buf.getvalue()


def _samples(tmp_path, n, bad=()):
    out = []
    for i in range(n):
        path = tmp_path / f"{i}.png"
        path.write_bytes(b"\x89PNG\r\n\x1a\n garbage" if i in bad else _png(i))
        out.append(Sample(f"s{i}", (), i, images=(str(path),)))
    return out


def test_decode_samples_drops_and_names_bad_files(tmp_path):
    samples = _samples(tmp_path, 4, bad={2})
    good, bad = decode_samples(samples)
    assert [s.id for s in good] == ["s0", "s1", "s3"]
    assert isinstance(good[0].images[0], Image.Image) and good[0].meta is samples[0].meta
    assert isinstance(samples[0].images[0], str)  # the original still holds only the reference
    assert bad[0][0].id == "s2" and str(tmp_path / "2.png") in bad[0][1]


@pytest.mark.parametrize("prefetch", [False, True])
def test_stream_drops_warns_counts(tmp_path, caplog, prefetch):
    samples = _samples(tmp_path, 200, bad={5})
    plain = SeededStream(samples, seed=3)
    stream = MediaStream(SeededStream(samples, seed=3), max_bad_frac=0.01, prefetch=prefetch)
    taken, dropped = [], 0
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        for _ in range(10):
            taken += [s.id for s in stream.take(16)]
            dropped += stream.pop_bad()
    expect = [s.id for s in plain.take(160)]
    assert stream.pos == plain.pos == 160
    assert taken == [i for i in expect if i != "s5"]  # same order as without media checks, minus s5
    assert dropped == expect.count("s5") == 1
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "s5" in msgs[0] and str(tmp_path / "5.png") in msgs[0]
    stream.close()


def test_stream_stops_past_the_fraction(tmp_path):
    samples = _samples(tmp_path, 20, bad={1, 2, 3})
    stream = MediaStream(SeededStream(samples, seed=0), max_bad_frac=0.1, prefetch=False)
    with pytest.raises(BadMediaError) as err:
        for _ in range(5):
            stream.take(4)
    msg = str(err.value)
    # the limit is 0.1 of the source's 20 rows = 2 rows: the third bad row stops it, whenever drawn
    assert msg.startswith("the task's samples: 3 of 20 rows are bad (0 at load, 3 with media that fail to decode; "
                          "more than task.max_bad_frac=0.1); first: s")
    assert ".png: cannot decode image" in msg
    # with a permissive fraction the same stream runs through all 20 and drops exactly 3
    stream = MediaStream(SeededStream(samples, seed=0), max_bad_frac=0.5, prefetch=True)
    got = [s.id for _ in range(5) for s in stream.take(4)]
    assert len(got) == 17 and stream.pop_bad() == 3
    stream.close()


def test_a_corrupt_video_is_dropped_like_an_image(tmp_path):
    from mmrlvr.data.feed import DecodedVideo
    from mmrlvr.data.media import VideoRef

    import numpy as np

    bad_path = tmp_path / "broken.mp4"
    bad_path.write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a video")
    frames = np.zeros((2, 28, 28, 3), np.uint8)
    samples = [Sample("v0", (), 0, videos=(VideoRef(str(bad_path), nframes=2),)),
               Sample("v1", (), 0, videos=(frames,))]
    good, bad = decode_samples(samples, {"max_frames": 4})
    assert [s.id for s in good] == ["v1"] and good[0].videos[0] is frames  # arrays pass through
    assert bad[0][0].id == "v0" and "broken.mp4" in bad[0][1]
    assert DecodedVideo(frames, {"fps": 2}).load(max_frames=1) == (frames, {"fps": 2})


def test_an_image_the_processor_would_refuse_is_dropped_before_the_batch(tmp_path):
    samples = _samples(tmp_path, 3)
    Image.new("RGB", (28, 8000)).save(tmp_path / "1.png")  # aspect 285.7:1, over the processor's 200:1
    good, bad = decode_samples(samples)
    assert [s.id for s in good] == ["s0", "s2"]
    assert bad[0][0].id == "s1" and f"{tmp_path / '1.png'}: aspect ratio 286:1" in bad[0][1]


def test_a_prompt_dropped_for_bad_media_leaves_replays_flight(tmp_path):
    """PromptReplay refuses feedback for prompts not in flight and never replays one in flight: a
    prompt dropped for bad media is fed back as an all-NaN row with the step's scored ones."""
    import torch

    from mmrlvr.methods.replay.prompts import PromptReplay

    samples = _samples(tmp_path, 6, bad={3})
    replay = PromptReplay(samples, seed=0, cooldown=0)
    stream = MediaStream(replay, max_bad_frac=1.0)
    got = stream.take(6, step=1)
    assert len(got) == 5 and "s3" not in {s.id for s in got} and not replay.prefetchable
    ids = [s.id for s in got]
    # rewards 0.5 for every scored prompt: all queue (0.24 <= 0.5 <= 0.7)
    stream.feedback(1, ids, torch.full((5, 2), 0.5))
    assert replay.in_flight == {}
    assert "s3" not in replay.pass_rate and sorted(replay.queue_order()) == sorted(ids)  # NaN row: no rate
    stream.feedback(1, ids[:0], torch.zeros(0, 2))  # nothing left to add
    stream.close()


def test_a_bad_row_drawn_again_counts_once(tmp_path):
    """Epoch after epoch the same undecodable row is dropped (data/bad_media counts each drop) but
    it is one bad row of the file: 1 of 3 rows under max_bad_frac=1/3 never stops the run; a second
    bad row does, at once."""
    samples = _samples(tmp_path, 3, bad={1})
    stream = MediaStream(SeededStream(samples, seed=0), max_bad_frac=1 / 3, prefetch=False)
    got = [s.id for _ in range(6) for s in stream.take(3)]  # 6 epochs
    assert len(got) == 12 and stream.pop_bad() == 6 and stream.bad_rows.total == 1
    stream = MediaStream(SeededStream(_samples(tmp_path, 3, bad={1, 2}), seed=0), max_bad_frac=1 / 3, prefetch=False)
    with pytest.raises(BadMediaError, match=r"2 of 3 rows are bad \(0 at load, 2 with media"):
        stream.take(3)
