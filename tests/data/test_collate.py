import pytest
import torch
from PIL import Image

from mmrlvr.data.collate import encode_prompts, pad_right, repeat_prompts, select_rows
from mmrlvr.types import Sample


def _sample(i, n_images, size=(56, 56)):
    content = [{"type": "image"}] * n_images + [{"type": "text", "text": "q" * (i + 1)}]
    return Sample(f"s{i}", ({"role": "user", "content": content},), 0,
                  images=tuple(Image.new("RGB", size, (40 * i, 0, 0)) for _ in range(n_images)))


def test_repeat_and_select_keep_media_aligned(tiny):
    _, processor = tiny
    samples = [_sample(0, 1), _sample(1, 2, (84, 56)), _sample(2, 1)]
    enc = encode_prompts(processor, samples)
    rep = repeat_prompts(enc, 3)
    assert rep["input_ids"].shape[0] == 9
    assert rep["image_grid_thw"].shape[0] == 3 * 4
    # the repeat equals processing each prompt three times
    direct = encode_prompts(processor, [s for s in samples for _ in range(3)])
    assert torch.equal(rep["input_ids"], direct["input_ids"])
    assert torch.equal(rep["pixel_values"], direct["pixel_values"])
    assert torch.equal(rep["image_grid_thw"], direct["image_grid_thw"])
    sub = select_rows(rep, [3, 8])
    one = encode_prompts(processor, [samples[1], samples[2]])
    assert torch.equal(sub["pixel_values"], one["pixel_values"])
    assert sub["_n_images"] == [2, 1]


def test_pad_right():
    ids, mask = pad_right([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_media_the_processor_refuses_are_bad_media_naming_the_sample(tiny, monkeypatch, tmp_path):
    """The 28 x 8000 strip with the pre-check switched off: the real processor raises its own
    ValueError ("absolute aspect ratio must be smaller than 200"), which must come out as a
    MediaError naming the sample and the file (callers drop or skip MediaErrors, not ValueErrors)."""
    import mmrlvr.data.media as media
    from mmrlvr.data.media import MediaError

    _, processor = tiny
    path = tmp_path / "strip.png"
    Image.new("RGB", (28, 8000)).save(path)
    s = Sample("row-9", ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]},), 0,
               images=(str(path),))
    with pytest.raises(MediaError, match=r"aspect ratio 286:1"):  # the pre-check, before the processor
        encode_prompts(processor, [s])
    monkeypatch.setattr(media, "MAX_ASPECT_RATIO", 1e9)
    with pytest.raises(MediaError, match=rf"processor refused the media of sample\(s\) row-9 \({path}\): .*aspect ratio"):
        encode_prompts(processor, [s])
