import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from mmrlvr.types import Sample
from mmrlvr.viz.attention import (
    cell_box, merged_grid, split_visual_attention, temporal_profile, token_attention, upsample,
)
from mmrlvr.viz.heatmap import overlay_heatmap

IMG, VID = 90, 91


def test_merged_grid():
    assert merged_grid((1, 8, 8)) == (1, 4, 4)  # 112x112 image: 8x8 patches of 14 -> 4x4 tokens
    assert merged_grid((2, 6, 10)) == (2, 3, 5)
    with pytest.raises(ValueError, match="not divisible"):
        merged_grid((1, 7, 8))


def test_split_two_images_and_a_video_in_raster_order():
    # image 0: grid 1x4x2 -> 1x2x1 = 2 tokens; image 1: 1x4x6 -> 1x2x3 = 6; video: 2x4x4 -> 2x2x2 = 8
    ids = [0] + [IMG] * 2 + [5] + [IMG] * 6 + [7, 8] + [VID] * 8 + [3]
    ids = torch.tensor(ids)
    row = torch.arange(len(ids), dtype=torch.float)  # the "attention" to position p is p
    maps = split_visual_attention(row, ids, IMG, VID, torch.tensor([[1, 4, 2], [1, 4, 6]]), torch.tensor([[2, 4, 4]]))
    assert [(m.kind, m.index) for m in maps] == [("image", 0), ("image", 1), ("video", 0)]
    np.testing.assert_array_equal(maps[0].weights, [[[1], [2]]])
    np.testing.assert_array_equal(maps[1].weights, [[[4, 5, 6], [7, 8, 9]]])  # rows then columns
    np.testing.assert_array_equal(maps[2].weights, [[[12, 13], [14, 15]], [[16, 17], [18, 19]]])  # time first
    np.testing.assert_array_equal(temporal_profile(maps[2]), [12 + 13 + 14 + 15, 16 + 17 + 18 + 19])
    assert maps[1].input_size == (6 * 14, 4 * 14)
    with pytest.raises(ValueError, match="7 image tokens"):
        split_visual_attention(row[:-1], torch.cat([ids[:1], ids[2:]]), IMG, None, torch.tensor([[1, 4, 2], [1, 4, 6]]))


def test_cell_box_on_a_known_grid():
    # original 200x100 seen as 224x112: 16x8 patches -> 8x4 merged cells of 28 input pixels
    # cell (row 1, col 2) = input [56, 28, 84, 56] -> x * 200/224, y * 100/112 = [50, 25, 75, 50]
    assert cell_box(1, 2, (4, 8), (200, 100), (224, 112)) == pytest.approx([50, 25, 75, 50])


def test_processor_grid_and_input_size_for_a_wide_image(tiny):
    _, processor = tiny
    # 200x100: round(100/28)*28 = 112, round(200/28)*28 = 196 (21952 px within the tiny processor's
    # 3136..50176), so 8x14 patches, 4x7 merged tokens, the model sees 196x112
    out = processor.image_processor(images=[Image.new("RGB", (200, 100))], return_tensors="pt")
    assert out["image_grid_thw"].tolist() == [[1, 8, 14]]
    maps = split_visual_attention(torch.ones(28), torch.full((28,), IMG), IMG, None, out["image_grid_thw"])
    assert maps[0].weights.shape == (1, 4, 7) and maps[0].input_size == (196, 112)
    # last cell covers the bottom right corner of the original image exactly
    assert cell_box(3, 6, (4, 7), (200, 100), maps[0].input_size) == pytest.approx([1200 / 7, 75, 200, 100])


def test_upsample_by_hand():
    w = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    # 7 columns over 3 cells: floor(x * 3 / 7) = 0 0 0 1 1 2 2; 4 rows over 2 cells: 0 0 1 1
    expected = np.array([[1, 1, 1, 2, 2, 3, 3]] * 2 + [[4, 4, 4, 5, 5, 6, 6]] * 2, dtype=float)
    np.testing.assert_array_equal(upsample(w, (7, 4)), expected)


@settings(max_examples=60, deadline=None)
@given(gh=st.integers(1, 6), gw=st.integers(1, 6), width=st.integers(1, 300), height=st.integers(1, 300),
       x=st.floats(0, 0.999), y=st.floats(0, 0.999))
def test_upsample_agrees_with_cell_box(gh, gw, width, height, x, y):
    """Every pixel of the heat map lies inside the box of the cell whose value it shows."""
    index = np.arange(gh * gw, dtype=float).reshape(gh, gw)
    px, py = int(x * width), int(y * height)
    cell = int(upsample(index, (width, height))[py, px])
    x1, y1, x2, y2 = cell_box(cell // gw, cell % gw, (gh, gw), (width, height), (gw * 28, gh * 28))
    assert x1 - 1e-9 <= px < x2 + 1e-9 and y1 - 1e-9 <= py < y2 + 1e-9


def test_overlay_puts_heat_in_the_right_cell():
    image = Image.new("RGB", (200, 100), (255, 255, 255))
    weights = np.zeros((4, 8))
    weights[1, 2] = 1.0  # the cell [50, 25, 75, 50] of test_cell_box_on_a_known_grid
    out = np.asarray(overlay_heatmap(image, weights, alpha=0.6, cmap="gray"))
    # gray: hot = white -> stays 255; cold = black -> 0.4 * 255 = 102
    assert out.shape == (100, 200, 3)
    assert (out[25:50, 50:75] == 255).all()
    assert (out[:25] == 102).all() and (out[:, 75:] == 102).all() and (out[50:] == 102).all()


def _board(color):
    img = Image.new("RGB", (112, 112), (235, 235, 235))
    img.paste(color, (28, 28, 56, 56))
    return img


def test_token_attention_on_the_tiny_model(tiny):
    model, processor = tiny
    msg = ({"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "How many?"}]},)
    sample = Sample(id="x", messages=msg, reference=1, images=(_board((220, 40, 40)), Image.new("RGB", (112, 56))))
    before = model.config._attn_implementation
    res = token_attention(model, processor, sample, "<answer>1</answer>", tokens=slice(-3, None))
    assert model.config._attn_implementation == before  # eager only for this forward
    assert [m.weights.shape for m in res.maps] == [(1, 4, 4), (1, 2, 4)]  # 112x112 and 112 wide x 56 high
    assert len(res.tokens) == 3 and len(res.per_token) == 3
    # the mean map is the mean of the per-token maps; every map is a share of a softmax row
    np.testing.assert_allclose(res.maps[0].weights, np.mean([t[0].weights for t in res.per_token], axis=0), rtol=1e-5)
    assert 0 < res.visual_share <= 1
    assert res.visual_share == pytest.approx(sum(float(m.weights.sum()) for m in res.maps))


def test_token_attention_reads_the_row_that_predicts_the_token(tiny):
    """Token k's map is the attention row at prompt length + k - 1, read from a plain eager forward."""
    from mmrlvr.data.collate import encode_prompts, model_kwargs

    model, processor = tiny
    msg = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Count."}]},)
    sample = Sample(id="x", messages=msg, reference=1, images=(_board((40, 80, 220)),))
    ids = processor.tokenizer("<answer>2</answer>", add_special_tokens=False)["input_ids"]
    res = token_attention(model, processor, sample, ids, tokens=[0, 3])
    prompt = encode_prompts(processor, [sample])
    p = prompt["input_ids"].shape[1]
    full = {**model_kwargs(prompt), "input_ids": torch.cat([prompt["input_ids"], torch.tensor([ids])], 1)}
    full["attention_mask"] = torch.ones_like(full["input_ids"])
    full["mm_token_type_ids"] = torch.cat([prompt["mm_token_type_ids"], torch.zeros(1, len(ids), dtype=torch.long)], 1)
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = model(**full, output_attentions=True).attentions
    finally:
        model.set_attn_implementation("sdpa")
    mean = torch.stack([a[0] for a in att]).mean(dim=(0, 1))
    image_pos = (full["input_ids"][0] == model.config.image_token_id).nonzero().flatten()
    for k, maps in zip([0, 3], res.per_token):
        expected = mean[p + k - 1, image_pos].reshape(1, 4, 4).numpy()
        np.testing.assert_allclose(maps[0].weights, expected, rtol=1e-4, atol=1e-7)


def test_token_attention_rejects_bad_selections(tiny):
    model, processor = tiny
    msg = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Count."}]},)
    sample = Sample(id="x", messages=msg, reference=1, images=(_board((40, 80, 220)),))
    with pytest.raises(ValueError, match="do not select"):
        token_attention(model, processor, sample, "<answer>2</answer>", tokens=[99])
    with pytest.raises(ValueError, match="empty completion"):
        token_attention(model, processor, sample, [])


def _video_sample(video):
    msg = ({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens first?"}]},)
    return Sample(id="v", messages=msg, reference="A", videos=(video,))


def test_video_attention_has_one_map_per_temporal_patch(tiny):
    from mmrlvr.viz.heatmap import plot_video_attention, sample_frames

    model, processor = tiny
    frames = np.zeros((8, 56, 84, 3), dtype=np.uint8)
    frames[:, :28, :28] = 255  # something to look at
    sample = _video_sample(frames)
    res = token_attention(model, processor, sample, "A")
    (vmap,) = res.maps
    shown = sample_frames(processor, sample)[0]
    assert vmap.kind == "video" and vmap.weights.shape[0] * 2 == len(shown)  # 8 frames -> 4 temporal patches
    assert vmap.weights.shape[0] == 4 and vmap.grid_thw[0] == 4
    assert temporal_profile(vmap).sum() == pytest.approx(res.visual_share, rel=1e-5)
    fig = plot_video_attention(shown, vmap)
    assert [ax.get_title() for ax in fig.axes[:4]] == ["frames 0-1", "frames 2-3", "frames 4-5", "frames 6-7"]


def test_video_attention_on_a_real_clip(tiny, shared_data):
    from mmrlvr.data.media import VideoRef
    from mmrlvr.viz.heatmap import sample_frames

    model, processor = tiny
    sample = _video_sample(VideoRef(str(shared_data / "video_clips" / "mmaction2__tests_data_test.mp4"), nframes=6))
    res = token_attention(model, processor, sample, "A person")
    shown = sample_frames(processor, sample)[0]
    assert len(shown) == 6 and res.maps[0].weights.shape[0] == 3
    w, h = shown[0].size
    t, gh, gw = res.maps[0].grid_thw
    # the processor resized each frame to gw x gh patches of 14: aspect kept within one merged cell
    assert abs(gw * 14 / (gh * 14) - w / h) < 28 / (gh * 14) * (w / h) + 0.1


@pytest.mark.parametrize("text, answer", [
    ("<answer>down</answer>", "down"),
    ("<think>3 or 4</think> <answer> 12 </answer>", "12"),
    ("<answer>1</answer> wait <answer>right</answer>", "right"),  # the last answer, as the verifiers read it
    ("<answer>left", "left"),
    ("no tags at all", None),
])
def test_answer_tokens_pick_the_answer_span(tiny, text, answer):
    from mmrlvr.viz.attention import answer_tokens

    tok = tiny[1].tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    picked = answer_tokens(tok, ids)
    if answer is None:
        assert picked == []
    else:
        assert tok.decode([ids[k] for k in picked]).strip() == answer
        assert picked == list(range(picked[0], picked[-1] + 1))


def test_attention_figures_have_one_shared_colour_bar(tiny):
    from mmrlvr.viz.heatmap import plot_image_attention

    model, processor = tiny
    msg = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]},)
    sample = Sample(id="x", messages=msg, reference=1, images=(_board((220, 40, 40)),))
    res = token_attention(model, processor, sample, "<answer>1</answer>", tokens=slice(-3, None))
    fig = plot_image_attention(sample.images[0], res, max_tokens=3)
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "attention weight per visual token"]
    assert len(bars) == 1
    # its scale runs to the largest cell of any panel (mean and per-token maps share it)
    top = max(float(m.weights.max()) for m in [res.maps[0], *[t[0] for t in res.per_token]])
    assert bars[0].get_ylim()[1] == pytest.approx(top)
