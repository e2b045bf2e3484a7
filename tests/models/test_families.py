"""Every tiny family through the RL code paths: sampler vs learner log-probs, media-once vs
per-row encoding, never-sampled media tokens, LoRA placement, and loading by `tiny:<model_type>`."""

from __future__ import annotations

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import repeat_prompts
from mmrlvr.models.adapters import adapter_for
from mmrlvr.models.families import FAMILIES
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.train.logprobs import completion_logprobs, shared_media_outputs
from mmrlvr.tasks import load_task

G = 3  # completions per prompt
_MEDIA_WORDS = ("image", "video", "vision", "boi", "eoi")


def _config_media_ids(config) -> set[int]:
    """Media token ids as the family's own config names them (independent of the adapter)."""
    ids = set()
    for cfg in (config, getattr(config, "text_config", None)):
        for key, value in (vars(cfg) if cfg is not None else {}).items():
            if (key.endswith("_token_id") or key.endswith("_token_index")) and isinstance(value, int) \
                    and any(w in key for w in _MEDIA_WORDS):
                ids.add(value)
    return ids


VIDEO_FAMILIES = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "llava_onevision")  # processors that take video


def _samples(n: int = 2, media: str = "image"):
    # two different prompts (the second group sees another image / clip)
    if media == "video":
        return load_task("video_motion", "train", n, seed=3, frames=4)
    return load_task("counting", "train", n, seed=3)


@pytest.mark.parametrize("model_type,media", [(f, "image") for f in FAMILIES] + [(f, "video") for f in VIDEO_FAMILIES])
def test_sampler_learner_and_media_once_logprobs_agree(model_type, media, family_policy):
    model, processor = family_policy(model_type)
    assert model.config.model_type == model_type
    engine = HFRolloutEngine(model, processor)
    # every media token the config names is suppressed when sampling
    assert _config_media_ids(model.config) <= set(engine.suppress_ids), model_type
    sampling = RolloutConfig(temperature=0.7, max_new_tokens=7)  # not 1.0: a missing temperature shows
    out = engine.rollout(_samples(media=media), G, sampling, seed=5, return_logprobs=True)
    assert not set(out.completion_ids[out.completion_mask.bool()].tolist()) & set(engine.suppress_ids)
    inputs = repeat_prompts(out.prompt_inputs, G)
    model.eval()
    with torch.no_grad():
        assert shared_media_outputs(model, inputs) is not None  # the media-once path is taken
        once, _ = completion_logprobs(model, inputs, out.completion_ids, out.completion_mask,
                                      temperature=0.7, suppress_ids=engine.suppress_ids)
        per_row_inputs = {k: v for k, v in inputs.items() if k not in ("_base", "_row_prompt")}
        per_row, _ = completion_logprobs(model, per_row_inputs, out.completion_ids, out.completion_mask,
                                         temperature=0.7, suppress_ids=engine.suppress_ids)
    m = out.completion_mask.bool()
    assert (once[m] - out.sampler_logprobs[m]).abs().max() < 1e-4, model_type
    assert (once[m] - per_row[m]).abs().max() < 1e-5, model_type


@pytest.mark.parametrize("model_type", FAMILIES)
def test_lora_attaches_to_the_language_model_only(model_type, family_policy):
    model, _ = family_policy(model_type, lora_rank=2)
    adapter = adapter_for(model_type)
    lora = [n for n, _ in model.named_parameters() if "lora_A" in n]
    text_layers = model.config.get_text_config().num_hidden_layers
    assert len(lora) == 7 * text_layers  # q, k, v, o, gate, up, down in every LM layer
    assert all(f".{adapter.language_module}." in n for n in lora)
    assert not any(f".{adapter.vision_module}." in n for n in lora)


def test_unknown_tiny_family_is_named_before_loading():
    from mmrlvr.models.load import checkpoint_path

    with pytest.raises(ValueError, match="tiny:blip.*known: tiny:qwen2_5_vl"):
        checkpoint_path("tiny:blip")


def test_a_family_without_media_once_falls_back_per_row_with_a_logged_reason(family_policy, monkeypatch, caplog):
    import dataclasses

    from mmrlvr.models.family_spec import FAMILY_SPECS
    from mmrlvr.train import logprobs

    model, processor = family_policy("gemma3")
    engine = HFRolloutEngine(model, processor)
    out = engine.rollout(_samples(), 2, RolloutConfig(max_new_tokens=4), seed=1)
    inputs = repeat_prompts(out.prompt_inputs, 2)
    spec = FAMILY_SPECS["gemma3"]
    monkeypatch.setitem(FAMILY_SPECS, "gemma3", dataclasses.replace(spec, adapter=dataclasses.replace(spec.adapter, feature_inputs={})))
    monkeypatch.setattr(logprobs, "_logged", set())
    with torch.no_grad(), caplog.at_level("WARNING"):
        assert shared_media_outputs(model, inputs) is None
        lp, _ = completion_logprobs(model, inputs, out.completion_ids, out.completion_mask)
    assert "gemma3: media encoded once per row, not once per group: no image encoder inputs" in caplog.text
    assert torch.isfinite(lp[out.completion_mask.bool()]).all()


@pytest.mark.parametrize("model_type", FAMILIES)
def test_warm_start_targets_end_with_a_token_sampling_stops_at(model_type, family_policy, monkeypatch):
    """A teacher target ending in another family's end-of-turn text teaches the policy to write
    that text and never stop (seen: Gemma 3 wrote "<|im_end" and was truncated every time)."""
    from mmrlvr.train import sft

    model, processor = family_policy(model_type)
    seen = []
    real = sft.target_ids
    monkeypatch.setattr(sft, "target_ids", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    sft.sft_loss(model, processor, _samples())
    stops = HFRolloutEngine(model, processor).stop_ids
    assert all(row[-1] in stops for row in seen[0]), (model_type, processor.tokenizer.decode(seen[0][0]))
