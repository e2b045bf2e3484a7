"""Video through the stock processor and every batch operation of the step (tiny Qwen2.5-VL)."""

import numpy as np
import pytest
import torch
from PIL import Image

from mmrlvr.data.collate import encode_prompts, pad_right, repeat_prompts, select_rows
from mmrlvr.data.media import VideoRef
from mmrlvr.train.logprobs import completion_logprobs, shared_media_outputs
from mmrlvr.types import Sample

AVI = "mmaction2__tests_data_test.avi"  # 164 frames at 25 fps, 320x240


def _msg(*kinds, text="q"):
    return ({"role": "user", "content": [{"type": k} for k in kinds] + [{"type": "text", "text": text}]},)


def _video(i, t=4, size=64):
    rng = np.random.default_rng(i)
    return rng.integers(0, 255, (t, size, size, 3), dtype=np.uint8)


def test_video_message_round_trip_gives_the_sampled_fps_in_position_ids(tiny, shared_data):
    model, processor = tiny
    ref = VideoRef(str(shared_data / "video_clips" / AVI), nframes=8, max_pixels=112 * 84)
    enc = encode_prompts(processor, [Sample("v", _msg("video"), 0, videos=(ref,))])
    # 8 of 164 frames at 25 fps: sampled fps 8 / 164 * 25 = 1.2195; a temporal patch of 2 frames
    # spans 2 / 1.2195 = 1.64 s (the processor's default without our metadata would be 2 / 24)
    assert enc["second_per_grid_ts"].tolist() == pytest.approx([1.64])
    t, h, w = enc["video_grid_thw"][0].tolist()
    assert t == 4  # 8 frames in temporal pairs
    n_pad = int((enc["input_ids"] == processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")).sum())
    assert n_pad == t * h * w // 4  # 2x2 spatial merge
    pos, _ = model.model.get_rope_index(enc["input_ids"], enc["mm_token_type_ids"],
                                        video_grid_thw=enc["video_grid_thw"],
                                        second_per_grid_ts=enc["second_per_grid_ts"],
                                        attention_mask=enc["attention_mask"])
    temporal = pos[0, 0][enc["mm_token_type_ids"][0] == 2]
    start = int(temporal[0])
    # tokens_per_second 2 x 1.64 s = 3.28 per patch -> offsets 0, 3.28, 6.56, 9.84 -> 0, 3, 6, 9
    assert sorted(set((temporal - start).tolist())) == [0, 3, 6, 9]
    out = model(**{k: v for k, v in enc.items() if not k.startswith("_")})
    assert torch.isfinite(out.logits).all()


def _mixed(shared_data):
    avi = str(shared_data / "video_clips" / AVI)
    img = lambda c, s=(56, 56): Image.new("RGB", s, c)  # noqa: E731
    return [
        Sample("vid", _msg("video", text="order?"), 0, videos=(VideoRef(avi, nframes=4, max_pixels=84 * 56),)),
        Sample("txt", _msg(text="just text, a little longer"), 0),
        Sample("img", _msg("image", text="count"), 0, images=(img((200, 0, 0)),)),
        Sample("arr", _msg("video", text="which way"), 0, videos=(_video(1, t=6),)),
        Sample("both", _msg("image", "video", text="b"), 0, images=(img((0, 0, 200), (84, 56)),), videos=(_video(2),)),
        Sample("fps", _msg("video"), 0, videos=(VideoRef(avi, fps=1.0, max_frames=4, max_pixels=56 * 56, start=1.0, end=5.0),)),
    ]


def _unpadded(enc, row):
    return enc["input_ids"][row][enc["attention_mask"][row].bool()].tolist()


@pytest.mark.parametrize("kind", ["video", "mixed"])
def test_selecting_rows_equals_encoding_those_samples(tiny, shared_data, kind):
    _, processor = tiny
    samples = _mixed(shared_data)
    if kind == "video":
        samples = [s for s in samples if s.videos and not s.images]
    rep = repeat_prompts(encode_prompts(processor, samples), 2)
    n = len(samples) * 2
    for rows in (list(range(n)), [n - 1, 0], [1, 2, 5] if n > 5 else [1, 2], [3]):
        sub = select_rows(rep, rows)
        direct = encode_prompts(processor, [samples[r // 2] for r in rows])
        assert [_unpadded(sub, i) for i in range(len(rows))] == [_unpadded(direct, i) for i in range(len(rows))]
        for key in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts"):
            assert (key in sub) == (key in direct), key
            if key in sub:
                assert torch.equal(torch.as_tensor(sub[key]), torch.as_tensor(direct[key])), (key, rows)
        assert sub["_n_videos"] == direct["_n_videos"] and sub["_n_images"] == direct["_n_images"]


def test_media_once_forward_equals_plain_forward_on_mixed_batches(fresh_tiny, shared_data):
    model, processor = fresh_tiny
    samples = _mixed(shared_data)
    rep = repeat_prompts(encode_prompts(processor, samples), 2)
    plain = {k: v for k, v in rep.items() if k not in ("_base", "_row_prompt")}
    assert shared_media_outputs(model, rep) is not None
    n = 2 * len(samples)
    ids, mask = pad_right([[100 + i, 101, 102][: 1 + i % 3] for i in range(n)], 0)

    def run(inputs, rows):
        model.zero_grad()
        lp, _ = completion_logprobs(model, select_rows(inputs, rows), ids[rows], mask[rows])
        (lp * mask[rows]).sum().backward()
        return lp.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    for rows in (list(range(n)), [0, 1, 6, 7, 9], [2, 3]):  # all; video+arr rows; text only
        a, ga = run(rep, rows)
        b, gb = run(plain, rows)
        assert torch.allclose(a, b, atol=1e-5), rows
        assert len(ga) == len(gb) and all(torch.allclose(x, y, atol=1e-5) for x, y in zip(ga, gb)), rows
