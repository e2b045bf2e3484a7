"""Tiny Gemma 3: `Gemma3ForConditionalGeneration` (SigLIP tower, pooled to a fixed token count).

An image is `<start_of_image>` + `mm_tokens_per_image` x `<image_soft_token>` + `<end_of_image>`;
image tokens attend to each other bidirectionally, which the model learns from `token_type_ids`
(1 on image tokens), so every forward must carry them. Positions are plain 1-D.
"""

from __future__ import annotations

import torch

from mmrlvr.models.families.common import set_generation_ids, token_ids, train_tokenizer

MODEL_TYPE = "gemma3"
SPECIAL = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
           "<image_soft_token>"]
IMAGE_SIZE, PATCH, TOKENS_PER_IMAGE = 112, 14, 16  # 8x8 patches pooled to 4x4 = 16 tokens

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<start_of_image>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def build(seed: int = 0, vocab_size: int = 1024):
    """(model, processor) of a ~1 M-parameter Gemma 3 with 112 px images (16 image tokens)."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

    tok = train_tokenizer(
        SPECIAL, chat_template=CHAT_TEMPLATE, vocab_size=vocab_size, bos_token="<bos>", eos_token="<end_of_turn>",
        pad_token="<pad>", extra_special_tokens={"image_token": "<image_soft_token>", "boi_token": "<start_of_image>",
                                                 "eoi_token": "<end_of_image>"},
    )
    ids = token_ids(tok, SPECIAL)
    text = dict(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32,
                sliding_window=64, max_position_embeddings=2048, initializer_range=0.08,
                bos_token_id=ids["<bos>"], eos_token_id=ids["<end_of_turn>"], pad_token_id=ids["<pad>"])
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=IMAGE_SIZE, patch_size=PATCH, vision_use_head=False)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=TOKENS_PER_IMAGE,
                          boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"],
                          image_token_index=ids["<image_soft_token>"], initializer_range=0.08)
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config)
    set_generation_ids(model, bos=ids["<bos>"], eos=ids["<end_of_turn>"], pad=ids["<pad>"])
    image_processor = Gemma3ImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tok, chat_template=CHAT_TEMPLATE,
                                image_seq_length=TOKENS_PER_IMAGE)
    return model, processor
