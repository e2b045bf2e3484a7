"""Token signals on the tiny model: corruption, entropy, visual dependency, similarity, attention."""

import pytest
import torch

from mmrlvr.algos.token_weights import attention_to_visual, similarity_to_visual
from mmrlvr.data.collate import encode_prompts, pad_right, repeat_prompts
from mmrlvr.tasks import load_task
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.methods.token_weighting.signals import black_fill, compute_signals, corrupt_media, visual_attention
from mmrlvr.train.sft import target_ids

G = 2


@pytest.fixture(scope="module")
def batch(tiny):
    model, processor = tiny
    samples = load_task("counting", "train", 3, 0)
    inputs = repeat_prompts(encode_prompts(processor, samples), G)
    ids, mask = pad_right([t for t in target_ids(processor.tokenizer, samples) for _ in range(G)],
                          processor.tokenizer.pad_token_id)
    mask[1, -3:] = 0  # a shorter second completion: padding inside the batch
    return inputs, ids, mask


def test_black_fill_is_a_black_pixel_after_normalisation(tiny):
    _, processor = tiny
    fill = black_fill(processor)["pixel_values"]
    mean = torch.tensor(processor.image_processor.image_mean)
    std = torch.tensor(processor.image_processor.image_std)
    # the processor maps x in [0, 1] to (x - mean) / std; black (x = 0) -> -mean / std
    assert torch.allclose(fill * std + mean, torch.zeros(3), atol=1e-6)


def test_corrupt_media_blacks_out_whole_patches_per_prompt(tiny, batch):
    _, processor = tiny
    inputs, _, _ = batch
    fill = black_fill(processor)
    out = corrupt_media(inputs, 0.5, seed=3, fill=fill)
    base, new = inputs["_base"]["pixel_values"], out["_base"]["pixel_values"]
    # a row is one 14x14 patch x 2 frames, channel-major: 3 blocks of 2*14*14 = 392 values
    black_row = fill["pixel_values"].repeat_interleave(392)
    changed = (new != base).any(1)
    assert torch.equal(new[changed], black_row.expand(int(changed.sum()), -1))
    assert torch.equal(new[~changed], base[~changed])
    assert 0.4 < changed.float().mean().item() < 0.6  # 3 images x 64 patches at p = 0.5
    # the rows of a group repeat their prompt's corrupted image
    per_prompt = new.shape[0] // 3
    assert torch.equal(out["pixel_values"][: 2 * per_prompt], new[:per_prompt].repeat(2, 1))
    # seeded; prob 0 and 1 are the extremes
    assert torch.equal(corrupt_media(inputs, 0.5, seed=3, fill=fill)["_base"]["pixel_values"], new)
    assert not torch.equal(corrupt_media(inputs, 0.5, seed=4, fill=fill)["_base"]["pixel_values"], new)
    assert torch.equal(corrupt_media(inputs, 0.0, seed=3, fill=fill)["pixel_values"], inputs["pixel_values"])
    assert (corrupt_media(inputs, 1.0, seed=3, fill=fill)["pixel_values"] == black_row).all()
    assert torch.equal(inputs["_base"]["pixel_values"], base)  # the original is untouched


def test_signals_match_the_training_forward_and_vanish_without_corruption(tiny, batch):
    model, processor = tiny
    inputs, ids, mask = batch
    fill = black_fill(processor)
    _, ent = completion_logprobs(model, inputs, ids, mask, with_entropy=True)
    sig = compute_signals(model, inputs, ids, mask, ["entropy", "visual_dependency"], corrupt_prob=0.0, fill=fill)
    assert torch.allclose(sig["entropy"], ent.detach() * mask, atol=1e-5)
    # nothing corrupted: the corrupted forward is the clean one, dependency is 0 everywhere
    assert sig["visual_dependency"].abs().max().item() < 1e-4
    sig = compute_signals(model, inputs, ids, mask, ["visual_dependency"], corrupt_prob=1.0, fill=fill, chunk_rows=4)
    dep = sig["visual_dependency"]
    assert set(sig) == {"visual_dependency"}  # only what was asked for
    assert dep[mask.bool()].mean().item() > 0.01 and (dep[~mask.bool()] == 0).all()
    # chunking the rows changes nothing
    again = compute_signals(model, inputs, ids, mask, ["visual_dependency"], corrupt_prob=1.0, fill=fill, chunk_rows=64)
    assert torch.allclose(again["visual_dependency"], dep, atol=1e-5)


def test_dependency_compares_both_forwards_at_the_sampling_temperature(tiny, batch):
    """Clean and corrupted log-probs both at temperature 1.7 (the sampler's), with suppressed ids."""
    from mmrlvr.algos.token_weights import visual_dependency

    model, processor = tiny
    inputs, ids, mask = batch
    fill = black_fill(processor)
    kw = dict(temperature=1.7, suppress_ids=[0])
    sig = compute_signals(model, inputs, ids, mask, ["entropy", "visual_dependency"], corrupt_prob=0.5, seed=11,
                          fill=fill, **kw)
    lp, ent = completion_logprobs(model, inputs, ids, mask, with_entropy=True, **kw)
    lp_c, _ = completion_logprobs(model, corrupt_media(inputs, 0.5, seed=11, fill=fill), ids, mask, **kw)
    assert torch.allclose(sig["entropy"], ent.detach() * mask, atol=1e-5)
    want = visual_dependency(lp.detach(), lp_c.detach(), mask)
    assert torch.allclose(sig["visual_dependency"], want, atol=1e-5)
    assert want[mask.bool()].max().item() > 1e-3  # corruption at p = 0.5 does change something


def test_similarity_to_visual_hand_values():
    # positions: [v1, v2, text, c0-state, c1-state, last]; t = 2 -> states at positions 3 and 4
    h = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [5.0, 5.0], [3.0, 0.0], [-1.0, 1.0], [9.0, 9.0]]])
    visual = torch.tensor([[1, 1, 0, 0, 0, 0]])
    # mean normalised visual state = ([1, 0] + [0, 1]) / 2 = [.5, .5]
    # c0: [1, 0] . [.5, .5] = 0.5; c1: [-1, 1] / sqrt 2 . [.5, .5] = 0
    assert torch.allclose(similarity_to_visual(h, visual, 2), torch.tensor([[0.5, 0.0]]))


def test_similarity_probe_equals_hidden_states(tiny, batch):
    model, _ = tiny
    inputs, ids, mask = batch
    sig = compute_signals(model, inputs, ids, mask, ["visual_similarity"], similarity_layers=[0, 1], chunk_rows=4)
    from mmrlvr.methods.token_weighting.signals import _forward, _visual_ids

    with torch.no_grad():
        out = _forward(model, inputs, ids, mask, output_hidden_states=True, logits_to_keep=1)
    full_ids = torch.cat([inputs["input_ids"], ids], 1)
    visual = torch.isin(full_ids, _visual_ids(model))
    t = ids.shape[1]
    # hidden_states[i + 1] is decoder layer i's output
    want = (similarity_to_visual(out.hidden_states[1], visual, t) + similarity_to_visual(out.hidden_states[2], visual, t)) / 2
    assert torch.allclose(sig["visual_similarity"], want * mask, atol=1e-5)
    assert (sig["visual_similarity"][~mask.bool()] == 0).all()


def test_similarity_at_token_hand_values():
    # same states as above; at_token reads positions 4 and 5 (the completion tokens themselves)
    h = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [5.0, 5.0], [3.0, 0.0], [-1.0, 1.0], [9.0, 9.0]]])
    visual = torch.tensor([[1, 1, 0, 0, 0, 0]])
    # c0: [-1, 1] / sqrt 2 . [.5, .5] = 0; c1: [1, 1] / sqrt 2 . [.5, .5] = 1 / sqrt 2
    want = torch.tensor([[0.0, 2 ** -0.5]])
    assert torch.allclose(similarity_to_visual(h, visual, 2, at_token=True), want)


def test_released_similarity_is_the_mean_over_all_hidden_states_at_each_token(tiny, batch):
    model, _ = tiny
    inputs, ids, mask = batch
    sig = compute_signals(model, inputs, ids, mask, ["visual_similarity"], similarity_layers=None,
                          similarity_at_token=True, chunk_rows=4)
    from mmrlvr.methods.token_weighting.signals import _forward, _visual_ids

    with torch.no_grad():
        out = _forward(model, inputs, ids, mask, output_hidden_states=True, logits_to_keep=1)
    visual = torch.isin(torch.cat([inputs["input_ids"], ids], 1), _visual_ids(model))
    t = ids.shape[1]
    # PEPO's released code: every entry of output_hidden_states (embeddings .. final norm), the state at t
    states = out.hidden_states
    assert len(states) == len(model.model.language_model.layers) + 1
    want = sum(similarity_to_visual(h, visual, t, at_token=True) for h in states) / len(states)
    assert torch.allclose(sig["visual_similarity"], want * mask, atol=1e-5)
    # not the predicting state, not the last layer alone
    shifted = sum(similarity_to_visual(h, visual, t) for h in states) / len(states)
    assert not torch.allclose(sig["visual_similarity"], shifted * mask, atol=1e-3)


def test_attention_to_visual_hand_values():
    # one head, 4 positions [v, text, c0-state, c1-state]; t = 1 -> the state at position 2
    attn = torch.zeros(1, 1, 4, 4)
    attn[0, 0, 2] = torch.tensor([0.25, 0.5, 0.25, 0.0])
    assert torch.allclose(attention_to_visual(attn, torch.tensor([[1, 0, 0, 0]]), 1), torch.tensor([[0.25]]))


def test_attention_to_visual_averages_the_heads():
    """Two heads; t = 2 reads the states at positions 0 and 1. At 1 the heads put 1.0 and 0.5 on the
    one visual position -> 0.75 (a sum over heads would give 1.5); at 0 both put 1.0 there."""
    attn = torch.zeros(1, 2, 3, 3)
    attn[0, 0, 1] = torch.tensor([1.0, 0.0, 0.0])
    attn[0, 1, 1] = torch.tensor([0.5, 0.5, 0.0])
    attn[0, :, 0, 0] = 1.0
    got = attention_to_visual(attn, torch.tensor([[1, 0, 0]]), 2)
    assert torch.allclose(got, torch.tensor([[1.0, 0.75]]))


def test_visual_attention_is_eager_attention_mass_and_restores_the_implementation(tiny, batch):
    model, _ = tiny
    inputs, ids, mask = batch
    before = model.config._attn_implementation
    att = visual_attention(model, inputs, ids, mask, layers=[-1], heads=[0, 2], chunk_rows=4)
    assert model.config._attn_implementation == before
    assert att.shape == ids.shape and (att[~mask.bool()] == 0).all()
    assert ((att >= 0) & (att <= 1 + 1e-5)).all() and att[mask.bool()].min() > 0
    from mmrlvr.methods.token_weighting.signals import _forward, _visual_ids

    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            a = _forward(model, inputs, ids, mask, output_attentions=True, logits_to_keep=1).attentions[-1]
    finally:
        model.set_attn_implementation(before)
    visual = torch.isin(torch.cat([inputs["input_ids"], ids], 1), _visual_ids(model))
    want = attention_to_visual(a[:, [0, 2]], visual, ids.shape[1])
    assert torch.allclose(att, want * mask, atol=1e-5)
