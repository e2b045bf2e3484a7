import json

import torch
from PIL import Image


def test_tiny_builds_and_loads_through_from_pretrained(tiny_dir, tiny):
    from transformers import AutoConfig

    model, processor = tiny
    cfg = AutoConfig.from_pretrained(tiny_dir)
    assert cfg.model_type == "qwen2_5_vl"
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    n = sum(p.numel() for p in model.parameters())
    assert 0.5e6 < n < 3e6
    tc = cfg.text_config
    assert sum(tc.rope_parameters["mrope_section"]) == tc.hidden_size // tc.num_attention_heads // 2
    tok = processor.tokenizer
    for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|im_end|>"):
        assert tok.convert_tokens_to_ids(t) != tok.unk_token_id
    assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert json.loads((tiny_dir / "mmrlvr_tiny.json").read_text())["version"] >= 1


def test_112px_image_is_16_visual_tokens(tiny):
    model, processor = tiny
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]}]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    out = processor(text=[text], images=[Image.new("RGB", (112, 112))], return_tensors="pt")
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((out["input_ids"] == image_id).sum()) == 16
    assert out["image_grid_thw"].tolist() == [[1, 8, 8]]
    assert text.endswith("<|im_start|>assistant\n")


def test_same_seed_same_weights(tmp_path):
    from mmrlvr.models.tiny import build_tiny

    a = build_tiny(tmp_path / "a", seed=1)
    b = build_tiny(tmp_path / "b", seed=1)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


def test_load_policy_tiny_name_uses_cache(monkeypatch, tmp_path):
    from mmrlvr.models import tiny as tiny_mod
    from mmrlvr.models.load import load_policy

    monkeypatch.setenv("MMRLVR_CACHE", str(tmp_path))
    model, processor = load_policy("tiny")
    assert (tiny_mod.tiny_cache_dir() / "model.safetensors").exists()
    assert processor.tokenizer.padding_side == "left"
    assert next(model.parameters()).dtype == torch.float32


def test_default_tiny_is_pinned(tiny_dir):
    """`tiny` (seed 0) must stay the model the quickstart's numbers were measured with: a hash of
    its weights (names and bytes) and its tokenizer vocabulary, taken before the model families
    were added. A change here changes every documented tiny result."""
    import hashlib

    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    state = load_file(str(tiny_dir / "model.safetensors"))
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].contiguous().numpy().tobytes())
    vocab = AutoTokenizer.from_pretrained(tiny_dir).get_vocab()
    h.update(json.dumps(sorted(vocab.items())).encode())
    assert h.hexdigest() == "f4c3ccb5966f573e4c3e15f92a03f3b9a856160ed1d2b281e9ec78b2c82efd2b"
