"""Tiny Qwen2-VL and Qwen3-VL (the Qwen2.5-VL default is `mmrlvr.models.tiny`, unchanged).

All three share the tokenizer, chat template and `<|vision_start|><|image_pad|>...<|vision_end|>`
placeholders, 3-D mRoPE positions from `get_rope_index` (`mm_token_type_ids` on every forward)
and one flat `pixel_values` of patches split per image by `image_grid_thw`. Qwen2-VL: patch 14,
vision MLP fc1/fc2, LayerNorm merger. Qwen3-VL: patch 16 (a 2x2 merged token covers 32 px),
learned position embeddings interpolated to the grid, deepstack features fed into early LM
layers, interleaved mRoPE, and timestamps written into video prompts.
"""

from __future__ import annotations

import torch

from mmrlvr.models import tiny
from mmrlvr.models.families.common import set_generation_ids

IMAGE_PIXELS = (28 * 28 * 4, 28 * 28 * 64)  # the default's limits (tiny.build_tiny)
VIDEO_PIXELS = (28 * 28 * 4, 28 * 28 * 16)


def _text(tok, ids, mrope: list[int], **extra) -> dict:
    return dict(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, initializer_range=0.08,
                rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                   "mrope_section": mrope, **extra},
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"], tie_word_embeddings=False)


def _media_ids(ids) -> dict:
    return dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])


def build_qwen2_vl(seed: int = 0, vocab_size: int = 1024):
    """(model, processor) of a ~1 M-parameter Qwen2-VL: 112 px image = 16 `<|image_pad|>`."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tok = tiny._train_tokenizer(vocab_size)
    ids = {t: tok.convert_tokens_to_ids(t) for t in tiny.SPECIAL_TOKENS}
    vision = dict(depth=2, embed_dim=64, hidden_size=128, num_heads=4, mlp_ratio=2, in_channels=3, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, initializer_range=0.08)
    config = Qwen2VLConfig(text_config=_text(tok, ids, [4, 6, 6]), vision_config=vision, **_media_ids(ids),
                           tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    set_generation_ids(model, bos=ids["<|endoftext|>"], eos=ids["<|im_end|>"], pad=ids["<|endoftext|>"])
    image = Qwen2VLImageProcessor(size={"shortest_edge": IMAGE_PIXELS[0], "longest_edge": IMAGE_PIXELS[1]})
    video = Qwen2VLVideoProcessor(size={"shortest_edge": VIDEO_PIXELS[0], "longest_edge": VIDEO_PIXELS[1]},
                                  min_pixels=VIDEO_PIXELS[0], max_pixels=VIDEO_PIXELS[1])
    processor = Qwen2VLProcessor(image_processor=image, tokenizer=tok, video_processor=video,
                                 chat_template=tiny.CHAT_TEMPLATE)
    return model, processor


def build_qwen3_vl(seed: int = 0, vocab_size: int = 1024):
    """(model, processor) of a ~1 M-parameter Qwen3-VL: 128 px image = 16 `<|image_pad|>` (32 px each)."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tok = tiny._train_tokenizer(vocab_size)
    ids = {t: tok.convert_tokens_to_ids(t) for t in tiny.SPECIAL_TOKENS}
    vision = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, in_channels=3, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=128, num_position_embeddings=64,
                  deepstack_visual_indexes=[1], initializer_range=0.08)
    text = _text(tok, ids, [4, 6, 6], mrope_interleaved=True)
    text["head_dim"] = 32
    config = Qwen3VLConfig(text_config=text, vision_config=vision, **_media_ids(ids), tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    set_generation_ids(model, bos=ids["<|endoftext|>"], eos=ids["<|im_end|>"], pad=ids["<|endoftext|>"])
    image = Qwen2VLImageProcessor(size={"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 64}, patch_size=16,
                                  merge_size=2)
    video = Qwen3VLVideoProcessor(size={"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 16}, patch_size=16,
                                  merge_size=2)
    processor = Qwen3VLProcessor(image_processor=image, tokenizer=tok, video_processor=video,
                                 chat_template=tiny.CHAT_TEMPLATE)
    return model, processor
