"""What the vLLM engine hands vLLM to continue an episode (no vLLM needed): the learner's token ids
with each expanded media placeholder run written once (vLLM expands it again), and the media in
order: the prompt's own, then the images the episode inserted."""

from __future__ import annotations

import pytest
from PIL import Image

from mmrlvr.rollout.continuation import EpisodeContext, continue_turn, prompt_ids
from mmrlvr.rollout.vllm_inputs import collapse_placeholders, continuation_request
from mmrlvr.types import Sample

IMG, VID, START, END = 151, 152, 150, 153


def test_collapse_placeholders_by_hand():
    # prompt: <s> image(4 pads) text; completion: 2 policy tokens, an inserted image (3 pads), a token
    ids = [1, START, IMG, IMG, IMG, IMG, END, 9, 9, 40, 41, START, IMG, IMG, IMG, END, 42]
    out, counts = collapse_placeholders(ids, {"image": IMG, "video": VID})
    assert out == [1, START, IMG, END, 9, 9, 40, 41, START, IMG, END, 42]
    assert counts == {"image": 2, "video": 0}
    # a video run, two images side by side (each between its own start/end)
    out, counts = collapse_placeholders([START, VID, VID, END, START, IMG, END, START, IMG, IMG, END],
                                        {"image": IMG, "video": VID})
    assert out == [START, VID, END, START, IMG, END, START, IMG, END] and counts == {"image": 2, "video": 1}


def test_continuation_request_orders_prompt_media_then_inserted():
    prompt_img, crop = Image.new("RGB", (56, 56), (200, 0, 0)), Image.new("RGB", (28, 28), (0, 0, 200))
    s = Sample("a", ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]},), 0,
               images=(prompt_img,))
    ids = [START, IMG, IMG, END, 7, 8, START, IMG, IMG, IMG, END]
    req = continuation_request(ids, s, [crop], {"image": IMG, "video": VID})
    assert req["prompt_token_ids"] == [START, IMG, END, 7, 8, START, IMG, END]
    images = req["multi_modal_data"]["image"]
    assert len(images) == 2 and images[0].getpixel((0, 0)) == (200, 0, 0) and images[1] is crop
    text_only = Sample("b", ({"role": "user", "content": "hi"},), 0)
    assert continuation_request([5, 6, 7], text_only, [], {"image": IMG}) == {"prompt_token_ids": [5, 6, 7]}
    with pytest.raises(ValueError, match="2 image placeholder runs in the context for 1 images"):
        continuation_request(ids, s, [], {"image": IMG, "video": VID})


class _TokenEngine:
    """A stand-in token-prompt engine: records the contexts it was asked to continue."""

    def __init__(self):
        self.seen = None

    def continue_contexts(self, contexts, sampling, seed, max_new_tokens, greedy=False):
        self.seen = (contexts, seed, max_new_tokens, greedy)
        return [([3], [-0.5], True, "x") for _ in contexts]


def test_token_prompt_engines_get_prompt_ids_unpadded_plus_the_completion():
    import torch

    from mmrlvr.rollout.episodes import _Row, EpisodeState

    s = Sample("a", ({"role": "user", "content": "hi"},), 0)
    inputs = {"input_ids": torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]]),
              "attention_mask": torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]), "_n_images": [0, 0], "_n_videos": [0, 0]}
    assert prompt_ids(inputs, 0) == [5, 6] and prompt_ids(inputs, 1) == [7, 8, 9, 10]
    crop = Image.new("RGB", (28, 28))
    row = _Row(s, 0, [11, 12, 13], [1, 0, 0], [0.0] * 3, [0] * 3, [], [], EpisodeState(s, ["t"]), images=[crop])
    engine = _TokenEngine()
    out = continue_turn(engine, inputs, [row], None, seed=4, max_new_tokens=2, greedy=True)
    assert out == [([3], [-0.5], True, "x")]
    (ctx,), seed, budget, greedy = engine.seen
    assert ctx == EpisodeContext(s, [5, 6, 11, 12, 13], (crop,)) and (seed, budget, greedy) == (4, 2, True)
