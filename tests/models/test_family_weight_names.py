"""transformers -> vLLM weight names for the non-Qwen families: every weight of each tiny family
lands on exactly one vLLM parameter, named as vLLM's own modules name them
(gemma3_mm.py / llava_onevision.py: `language_model.model.*`, `vision_tower.*`,
`multi_modal_projector.*`, `image_newline`; idefics3.py: transformers' own layout; q/k/v packed
into `qkv_proj` in the language model and in the SigLIP/Idefics3 vision attention)."""

from __future__ import annotations

import pytest

from mmrlvr.rollout.weight_names import sync_pairs, vllm_checkpoint_name, vllm_param_name


def _mapped(model, model_type):
    tied = model.config.get_text_config().tie_word_embeddings
    names = list(model.state_dict())
    mapped = {n: vllm_param_name(n, model_type, tied) for n in names}
    kept = [m for m in mapped.values() if m is not None]
    assert len(set(kept)) == len(kept)  # nothing overwrites anything
    return mapped


@pytest.mark.parametrize("model_type", ["gemma3", "llava_onevision"])
def test_llava_style_families_map_onto_vllm_modules(model_type, family_policy):
    model, _ = family_policy(model_type)
    m = _mapped(model, model_type)
    assert all(v[0].startswith(("language_model.model.", "language_model.lm_head.", "vision_tower.",
                                "multi_modal_projector.", "image_newline")) for v in m.values() if v)
    assert m["model.language_model.layers.0.self_attn.k_proj.weight"] == (
        "language_model.model.layers.0.self_attn.qkv_proj.weight", "k")
    assert m["model.language_model.layers.1.mlp.up_proj.weight"] == ("language_model.model.layers.1.mlp.gate_up_proj.weight", 1)
    # transformers 5.24 names the tower without `vision_model`; vLLM's SiglipVisionModel has it
    assert m["model.vision_tower.encoder.layers.0.self_attn.v_proj.bias"] == (
        "vision_tower.vision_model.encoder.layers.0.self_attn.qkv_proj.bias", "v")
    assert m["model.vision_tower.encoder.layers.0.mlp.fc1.weight"] == (
        "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", None)
    # vLLM's LLaVA-OneVision reads the tower before its final norm and builds no post_layernorm
    post = ("vision_tower.vision_model.post_layernorm.weight", None) if model_type == "gemma3" else None
    assert m["model.vision_tower.post_layernorm.weight"] == post
    # the released checkpoints' own naming lands on the same parameter
    assert vllm_param_name("model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight", model_type) == (
        "vision_tower.vision_model.encoder.layers.0.self_attn.qkv_proj.weight", "q")
    if model_type == "gemma3":  # tied embeddings: no lm_head; Gemma's q_norm is not packed
        assert m["model.multi_modal_projector.mm_input_projection_weight"] == (
            "multi_modal_projector.mm_input_projection_weight", None)
        assert m["model.language_model.layers.0.self_attn.q_norm.weight"][1] is None
        assert m["lm_head.weight"] is None  # vLLM ties it to embed_tokens
    else:
        assert m["model.image_newline"] == ("image_newline", None)
        assert m["lm_head.weight"] == ("language_model.lm_head.weight", None)


def test_idefics3_keeps_transformers_layout(family_policy):
    model, _ = family_policy("idefics3")
    m = _mapped(model, "idefics3")
    assert m["model.text_model.layers.0.self_attn.q_proj.weight"] == ("model.text_model.layers.0.self_attn.qkv_proj.weight", "q")
    assert m["model.text_model.layers.0.mlp.gate_proj.weight"] == ("model.text_model.layers.0.mlp.gate_up_proj.weight", 0)
    assert m["model.vision_model.encoder.layers.1.self_attn.k_proj.weight"] == (
        "model.vision_model.encoder.layers.1.self_attn.qkv_proj.weight", "k")
    assert m["model.connector.modality_projection.proj.weight"] == ("model.connector.modality_projection.proj.weight", None)
    assert m["lm_head.weight"] == ("lm_head.weight", None)
    assert vllm_param_name("lm_head.weight", "idefics3", tie_word_embeddings=True) is None


@pytest.mark.parametrize("model_type", ["gemma3", "llava_onevision", "idefics3"])
def test_synced_names_are_what_vllm_loads(model_type, family_policy):
    """vLLM 0.32's gemma3_mm / llava_onevision mappers only strip `model.` from the tower's names,
    so the synced SigLIP names carry `vision_model.` again (else: "There is no module or parameter
    named 'vision_tower.embeddings'"); everything else goes as transformers names it."""
    model, _ = family_policy(model_type)
    names = [n for n, _ in sync_pairs(model)]
    plain = list(model.state_dict())
    assert len(names) == len(plain)
    if model_type == "idefics3":  # vLLM keeps transformers' Idefics3 layout
        assert names == plain
        return
    moved = {p: n for p, n in zip(plain, names) if p != n}
    assert moved and all(p.startswith("model.vision_tower.") for p in moved)
    assert moved["model.vision_tower.embeddings.patch_embedding.weight"] == (
        "model.vision_tower.vision_model.embeddings.patch_embedding.weight")
    # a released checkpoint's name is left alone, and the name still maps onto vLLM's parameter
    released = "model.vision_tower.vision_model.encoder.layers.0.mlp.fc1.bias"
    assert vllm_checkpoint_name(released, model_type) == released
    assert vllm_param_name(moved["model.vision_tower.encoder.layers.0.mlp.fc1.bias"], model_type) == (
        "vision_tower.vision_model.encoder.layers.0.mlp.fc1.bias", None)
