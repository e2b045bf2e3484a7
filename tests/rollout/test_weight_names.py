"""transformers -> vLLM weight names (CPU): every policy weight of each Qwen-VL family lands on a
vLLM parameter, packed projections collapse as in vLLM, and LoRA syncs as merged base weights."""

from __future__ import annotations

import copy

import pytest
import torch

from mmrlvr.rollout.weight_names import checkpoint_name, sync_pairs, vllm_param_name

TEXT = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=1)


def _meta_names(config) -> list[str]:
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        return list(AutoModelForImageTextToText.from_config(config).state_dict())


def _qwen2_vl():
    from transformers import Qwen2VLConfig

    return Qwen2VLConfig(text_config={**TEXT, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
                         vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2))


def _qwen3_vl():
    from transformers import Qwen3VLConfig

    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    return Qwen3VLConfig(text_config={**TEXT, "rope_scaling": rope},
                         vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32,
                                            deepstack_visual_indexes=[1], num_position_embeddings=16))


def _check_all_map(names, model_type):
    mapped = [vllm_param_name(n, model_type) for n in names]
    assert all(m is not None for m in mapped)
    assert all(m[0].startswith(("language_model.model.", "language_model.lm_head.", "visual.")) for m in mapped)
    # a (vLLM name, shard) pair is hit by exactly one checkpoint tensor: nothing overwrites anything
    assert len(set(mapped)) == len(mapped)
    return dict(zip(names, mapped))


def test_tiny_qwen25vl_state_dict_maps_onto_vllm_names(tiny):
    model, _ = tiny
    names = list(model.state_dict())
    m = _check_all_map(names, "qwen2_5_vl")
    assert m["model.language_model.layers.0.self_attn.q_proj.weight"] == ("language_model.model.layers.0.self_attn.qkv_proj.weight", "q")
    assert m["model.language_model.layers.0.self_attn.v_proj.bias"] == ("language_model.model.layers.0.self_attn.qkv_proj.bias", "v")
    assert m["model.language_model.layers.1.mlp.up_proj.weight"] == ("language_model.model.layers.1.mlp.gate_up_proj.weight", 1)
    assert m["model.language_model.layers.1.mlp.down_proj.weight"] == ("language_model.model.layers.1.mlp.down_proj.weight", None)
    assert m["model.visual.blocks.0.attn.qkv.weight"] == ("visual.blocks.0.attn.qkv.weight", None)
    assert m["model.visual.blocks.0.mlp.gate_proj.weight"] == ("visual.blocks.0.mlp.gate_up_proj.weight", 0)
    assert m["model.visual.merger.mlp.0.weight"] == ("visual.merger.mlp.0.weight", None)
    assert m["lm_head.weight"] == ("language_model.lm_head.weight", None)
    # the original Qwen checkpoint naming maps to the same parameters
    assert vllm_param_name("model.layers.0.self_attn.k_proj.weight", "qwen2_5_vl") == ("language_model.model.layers.0.self_attn.qkv_proj.weight", "k")
    assert vllm_param_name("visual.blocks.0.mlp.up_proj.weight", "qwen2_5_vl") == ("visual.blocks.0.mlp.gate_up_proj.weight", 1)
    # tied embeddings: vLLM has no separate lm_head to load
    assert vllm_param_name("lm_head.weight", "qwen2_5_vl", tie_word_embeddings=True) is None
    # 4 text layers x (q, k, v weights and biases, gate, up) collapse into qkv_proj / gate_up_proj
    fused = {v[0] for v in m.values()}
    assert sum(".self_attn.qkv_proj." in f for f in fused) == 2 * model.config.text_config.num_hidden_layers


def test_qwen2vl_and_qwen3vl_names():
    m2 = _check_all_map(_meta_names(_qwen2_vl()), "qwen2_vl")
    assert m2["model.visual.blocks.0.mlp.fc1.weight"] == ("visual.blocks.0.mlp.fc1.weight", None)  # not packed
    assert m2["model.visual.merger.ln_q.weight"] == ("visual.merger.ln_q.weight", None)
    m3 = _check_all_map(_meta_names(_qwen3_vl()), "qwen3_vl")
    assert m3["model.visual.deepstack_merger_list.0.linear_fc1.weight"] == ("visual.deepstack_merger_list.0.linear_fc1.weight", None)
    assert m3["model.visual.blocks.1.mlp.linear_fc2.bias"] == ("visual.blocks.1.mlp.linear_fc2.bias", None)
    # Qwen3's q_norm/k_norm sit beside q_proj but are not packed
    assert m3["model.language_model.layers.0.self_attn.q_norm.weight"] == ("language_model.model.layers.0.self_attn.q_norm.weight", None)
    assert m3["model.language_model.layers.0.self_attn.q_proj.weight"][1] == "q"


def test_unknown_family_is_a_clear_error():
    with pytest.raises(ValueError, match="llava.*known: qwen2_5_vl, qwen2_vl"):
        vllm_param_name("model.x", "llava")


def test_lora_syncs_merged_weights_under_base_names(fresh_tiny):
    from mmrlvr.config import ModelConfig
    from mmrlvr.models.load import _wrap_lora

    model, _ = fresh_tiny
    plain = list(model.state_dict())
    peft_model = _wrap_lora(copy.deepcopy(model), ModelConfig(lora_rank=4))
    with torch.no_grad():  # peft starts B at zero (a no-op adapter): make it do something
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    pairs = sync_pairs(peft_model)
    assert [n for n, _ in pairs] == plain  # base names, adapter tensors gone
    merged = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    q = "model.language_model.layers.0.self_attn.q_proj.weight"
    got = dict(pairs)
    assert not torch.equal(got[q], model.state_dict()[q])  # the adapter moved it ...
    torch.testing.assert_close(got[q], merged[q])  # ... to exactly base + scale * B @ A
    # and the live adapter is unmerged again: the policy keeps training the adapter, not the base
    live = peft_model.state_dict()[f"base_model.model.{q.replace('q_proj.', 'q_proj.base_layer.')}"]
    torch.testing.assert_close(live, model.state_dict()[q])
    assert checkpoint_name("base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.default.weight") is None
