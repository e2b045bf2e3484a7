"""Tiny Idefics3 (the SmolVLM architecture): `Idefics3ForConditionalGeneration`.

An image is `<fake_token_around_image><global-img>` + `image_seq_len` x `<image>` +
`<fake_token_around_image>`; the vision tower's patches are pixel-shuffled by `scale_factor`.
Image splitting is off (one global view per image), so a 112 px image is 16 `<image>` tokens.
`pixel_values` are laid out per row (batch, images per row, 3, H, W) with a `pixel_attention_mask`.
"""

from __future__ import annotations

import torch

from mmrlvr.models.families.common import set_generation_ids, token_ids, train_tokenizer

MODEL_TYPE = "idefics3"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
           "<global-img>"]
IMAGE_SIZE, PATCH, SCALE = 112, 14, 2  # (112 / 14)^2 / 2^2 = 16 tokens per image

CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}"
    "{{ message['role'] | capitalize }}:"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<image>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def build(seed: int = 0, vocab_size: int = 1024):
    """(model, processor) of a ~1 M-parameter Idefics3 with 112 px images (16 image tokens)."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessor, Idefics3Processor

    tok = train_tokenizer(SPECIAL, chat_template=CHAT_TEMPLATE, vocab_size=vocab_size, bos_token="<|im_start|>",
                          eos_token="<end_of_utterance>", pad_token="<|endoftext|>",
                          extra_special_tokens={"image_token": "<image>"})
    ids = token_ids(tok, SPECIAL)
    text = dict(model_type="llama", vocab_size=len(tok), hidden_size=128, intermediate_size=256,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                initializer_range=0.08, tie_word_embeddings=False, bos_token_id=ids["<|im_start|>"],
                eos_token_id=ids["<end_of_utterance>"], pad_token_id=ids["<|endoftext|>"])
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=IMAGE_SIZE, patch_size=PATCH, initializer_range=0.08)
    config = Idefics3Config(text_config=text, vision_config=vision, scale_factor=SCALE,
                            image_token_id=ids["<image>"], tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config)
    set_generation_ids(model, bos=ids["<|im_start|>"], eos=ids["<end_of_utterance>"], pad=ids["<|endoftext|>"])
    image_processor = Idefics3ImageProcessor(size={"longest_edge": IMAGE_SIZE}, do_image_splitting=False,
                                             max_image_size={"longest_edge": IMAGE_SIZE})
    seq = (IMAGE_SIZE // PATCH) ** 2 // SCALE**2
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tok, image_seq_len=seq,
                                  chat_template=CHAT_TEMPLATE)
    return model, processor
