"""Tiny LLaVA-OneVision: `LlavaOnevisionForConditionalGeneration` (SigLIP tower, MLP projector, Qwen2 LM).

Images are cut "anyres": a base view plus tiles of the best-fitting grid pinpoint, with an
`image_newline` embedding after each row of features, so the number of `<image>` tokens depends
on the image's size (the processor computes it from `image_sizes`). `pixel_values` are
(images, views, 3, H, W) with one `image_sizes` row per image. Video: frames pooled 2x2.
"""

from __future__ import annotations

import torch

from mmrlvr.models.families.common import set_generation_ids, token_ids, train_tokenizer

MODEL_TYPE = "llava_onevision"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
TILE, PATCH = 56, 14  # 4x4 patches per view
PINPOINTS = [[56, 56], [56, 112], [112, 56], [112, 112]]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<image>\n"
    "{% elif part['type'] == 'video' or 'video' in part %}<video>\n"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build(seed: int = 0, vocab_size: int = 1024):
    """(model, processor) of a ~1 M-parameter LLaVA-OneVision with 56 px tiles."""
    from transformers import (
        LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration, LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor, LlavaOnevisionVideoProcessor,
    )

    tok = train_tokenizer(SPECIAL, chat_template=CHAT_TEMPLATE, vocab_size=vocab_size, eos_token="<|im_end|>",
                          pad_token="<|endoftext|>",
                          extra_special_tokens={"image_token": "<image>", "video_token": "<video>"})
    ids = token_ids(tok, SPECIAL)
    text = dict(model_type="qwen2", vocab_size=len(tok), hidden_size=128, intermediate_size=256,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                initializer_range=0.08, tie_word_embeddings=False, bos_token_id=ids["<|endoftext|>"],
                eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    vision = dict(model_type="siglip_vision_model", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, image_size=TILE, patch_size=PATCH, vision_use_head=False)
    config = LlavaOnevisionConfig(text_config=text, vision_config=vision, image_token_index=ids["<image>"],
                                  video_token_index=ids["<video>"], image_grid_pinpoints=PINPOINTS,
                                  vision_feature_select_strategy="full", vision_feature_layer=-1,
                                  vision_aspect_ratio="anyres_max_9", tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlavaOnevisionForConditionalGeneration(config)
    set_generation_ids(model, bos=ids["<|endoftext|>"], eos=ids["<|im_end|>"], pad=ids["<|endoftext|>"])
    image_processor = LlavaOnevisionImageProcessor(size={"height": TILE, "width": TILE}, image_grid_pinpoints=PINPOINTS)
    video_processor = LlavaOnevisionVideoProcessor(size={"height": TILE, "width": TILE})
    processor = LlavaOnevisionProcessor(image_processor=image_processor, tokenizer=tok, video_processor=video_processor,
                                        num_image_tokens=(TILE // PATCH) ** 2, vision_feature_select_strategy="full",
                                        chat_template=CHAT_TEMPLATE, vision_aspect_ratio="anyres_max_9")
    return model, processor
