"""KAWHI's signals on the tiny model: the hooked eager forward equals the pure functions applied to
`output_attentions`, the step ids come from the tokenizer, the loop weighs and writes them, and
bad settings fail before training."""

import json
from pathlib import Path

import pytest
import torch

from mmrlvr.config import load_config
from mmrlvr.data.collate import encode_prompts, pad_right, repeat_prompts
from mmrlvr.methods.kawhi.regions import head_map, region_attention
from mmrlvr.methods.kawhi.steps import segment_steps, step_weights
from mmrlvr.tasks import load_task
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.train.sft import target_ids
from mmrlvr.methods.token_weighting.signals import _forward, _visual_ids, compute_signals
from mmrlvr.methods.token_weighting.weigher import step_ids

G = 2


@pytest.fixture(scope="module")
def batch(tiny):
    model, processor = tiny
    samples = load_task("counting", "train", 3, 0)
    inputs = repeat_prompts(encode_prompts(processor, samples), G)
    ids, mask = pad_right([t for t in target_ids(processor.tokenizer, samples) for _ in range(G)],
                          processor.tokenizer.pad_token_id)
    mask[1, -3:] = 0  # mixed lengths: a shorter second completion
    mask[4, -5:] = 0
    return inputs, ids, mask


def _by_hand(model, inputs, ids, mask, layers, heads, frac):
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = _forward(model, inputs, ids, mask, output_attentions=True, logits_to_keep=1).attentions
    finally:
        model.set_attn_implementation(before)
    t = ids.shape[1]
    visual = torch.isin(torch.cat([inputs["input_ids"], ids], 1), _visual_ids(model)).float()
    maps = [head_map(att[i][:, :, -(t + 1) : -1], visual, mask, heads) for i in layers]
    return region_attention(maps, visual, mask, frac)


@pytest.mark.parametrize("layers, heads, frac", [((-2, -1), 2, 0.25), ((0,), 1, 0.5)])
def test_region_attention_equals_the_pure_functions_on_eager_attention(tiny, batch, layers, heads, frac):
    model, _ = tiny
    inputs, ids, mask = batch
    before = model.config._attn_implementation
    kw = dict(kawhi_layers=layers, kawhi_heads=heads, kawhi_region_frac=frac)
    sig = compute_signals(model, inputs, ids, mask, ["entropy", "region_attention"], chunk_rows=4, **kw)
    assert model.config._attn_implementation == before  # restored after the eager forward
    want = _by_hand(model, inputs, ids, mask, layers, heads, frac)
    got = sig["region_attention"]
    assert torch.allclose(got, want * mask, atol=1e-6)
    assert (got[~mask.bool()] == 0).all() and got[mask.bool()].min() > 0
    # the same forward gives the entropy the update would see
    _, ent = completion_logprobs(model, inputs, ids, mask, with_entropy=True)
    assert torch.allclose(sig["entropy"], ent * mask, atol=1e-5)
    # chunked differently (each chunk trimmed to its longest completion): the same values
    again = compute_signals(model, inputs, ids, mask, ["region_attention"], chunk_rows=64, **kw)
    assert torch.allclose(again["region_attention"], got, atol=1e-6)


def test_region_attention_in_bf16_follows_float32(tiny, batch):
    import copy

    model, _ = tiny
    inputs, ids, mask = batch
    low = copy.deepcopy(model).to(torch.bfloat16)
    bf = compute_signals(low, inputs, ids, mask, ["region_attention"])["region_attention"]
    fp = compute_signals(model, inputs, ids, mask, ["region_attention"])["region_attention"]
    assert bf.dtype == torch.float32
    valid = mask.bool()
    assert (bf[~valid] == 0).all()
    assert torch.allclose(bf[valid], fp[valid], rtol=0.1, atol=2e-3)  # bf16 keeps 8 bits of mantissa


def test_missing_layers_and_given_logprobs_are_refused(tiny, batch):
    model, _ = tiny
    inputs, ids, mask = batch
    with pytest.raises(ValueError, match=r"token_weighting.kawhi_layers=\[7\]: layers \[7\] do not exist"):
        compute_signals(model, inputs, ids, mask, ["region_attention"], kawhi_layers=[7])
    clean = {"logprobs": torch.zeros(ids.shape), "entropy": torch.zeros(ids.shape)}
    with pytest.raises(ValueError, match="region_attention need the clean forward"):
        compute_signals(model, inputs, ids, mask, ["region_attention"], clean=clean)


def test_step_ids_decode_each_token_and_zero_the_padding(tiny):
    _, processor = tiny
    tok = processor.tokenizer
    texts = ["Row one: red.", " Two.\n\nSo three."]
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    ids, mask = pad_right(rows, tok.pad_token_id)
    got = step_ids(tok, ids, mask, "sentence")
    for i, r in enumerate(rows):
        want = segment_steps([tok.decode([j]) for j in r], "sentence")
        assert got[i, : len(r)].tolist() == want
        assert (got[i, len(r):] == 0).all()
    assert int(got[0].max()) == 0 and int(got[1].max()) == 1  # " Two." then "So three."
    assert int(step_ids(tok, ids, mask, "paragraph")[1].max()) == 1 and int(step_ids(tok, ids, mask, "line")[0].max()) == 0


def test_loop_weighs_with_kawhi_and_writes_its_signals(tmp_path, monkeypatch):
    from mmrlvr.methods.token_weighting import weigher as token_roles
    from mmrlvr.recipe.loop import train

    splits = []
    real = token_roles.step_ids

    def spy(tokenizer, ids, mask, split):
        splits.append(split)
        return real(tokenizer, ids, mask, split)

    monkeypatch.setattr(token_roles, "step_ids", spy)
    plugin = Path(__file__).parents[2] / "e2e" / "user_verifier.py"
    cfg = load_config("configs/quickstart.yaml", [
        "task.train_size=32", "task.eval_size=8", "warm_start.steps=0", "rollout.prompts_per_step=2",
        "rollout.group_size=4", "rollout.max_new_tokens=12", "train.steps=2", "train.log_every=1",
        "train.save_every=0", f"output_dir={tmp_path / 'run'}", "verifier_workers=0",
        f"rewards=[{{verifier: {plugin}:even_length}}]", "token_weighting.method=kawhi",
        "token_weighting.kawhi_split=line", "token_weighting.kawhi_strength=0.5", "token_weighting.roles_per_step=2",
    ])
    train(cfg)
    run = tmp_path / "run"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r and r["rollout/mixed_group_frac"] > 0]
    assert steps, "the parity reward should give mixed groups"
    assert splits and set(splits) == {"line"}  # the configured split, on every weighted step
    for r in steps:
        assert r["tokens/weight_mean"] == pytest.approx(1.0, abs=1e-5)  # token-mean 1 per response
        assert r["tokens/steps_per_response"] >= 1 and r["tokens/region_attention"] > 0
        rec = json.loads((run / "token_roles" / f"step_{r['step']}.jsonl").read_text().splitlines()[0])
        assert {"entropy", "region_attention", "step_ids", "visual_dependency"} <= set(rec["signals"])
        n = len(rec["token_ids"])
        sig = {k: torch.tensor([v]) for k, v in rec["signals"].items()}
        sig["step_ids"] = sig["step_ids"].long()
        assert sig["step_ids"][0].tolist() == segment_steps(rec["tokens"], "line")
        want = step_weights(sig["region_attention"], sig["entropy"], sig["step_ids"], torch.ones(1, n), 0.5, 0.5)
        assert torch.allclose(torch.tensor(rec["weights"]), want[0], atol=1e-4)  # rounded to 6 decimals


@pytest.mark.parametrize("override, match", [
    ("token_weighting.kawhi_split=word", "token_weighting.kawhi_split='word': expected paragraph, line or sentence"),
    ("token_weighting.kawhi_layers=[]", r"token_weighting.kawhi_layers=\[\]: expected a non-empty list"),
    ("token_weighting.kawhi_heads=0", "token_weighting.kawhi_heads=0: expected an integer >= 1"),
    ("token_weighting.kawhi_region_frac=0", r"token_weighting.kawhi_region_frac=0.0: expected a number in \(0, 1\]"),
    ("token_weighting.kawhi_align_weight=1.5", r"token_weighting.kawhi_align_weight=1.5: expected a number in \[0, 1\]"),
    ("token_weighting.kawhi_strength=-0.1", r"token_weighting.kawhi_strength=-0.1: expected a number in \[0, 1\]"),
])
def test_bad_kawhi_settings_fail_before_training(tmp_path, override, match):
    from mmrlvr.config import ConfigError
    from mmrlvr.recipe.loop import train

    cfg = load_config(None, ["token_weighting.method=kawhi", override, f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=match):
        train(cfg)
    assert not (tmp_path / "run").exists()
