"""The embedded default: a tiny Qwen2.5-VL built offline, with its own tokenizer and processor.

Nothing is downloaded: the tokenizer is a byte-level BPE trained here on a fixed corpus, the
model is `Qwen2_5_VLForConditionalGeneration` built from a complete config, and the processor is
the stock `Qwen2_5_VLProcessor`. Everything is written with `save_pretrained`, so it loads through
the same `from_pretrained` path as `Qwen/Qwen2.5-VL-3B-Instruct`; only the directory differs.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from mmrlvr.models.quiet_bars import quiet_third_party_bars

TINY_NAME = "tiny"
TINY_VERSION = 1  # bump when the recipe changes, so cached copies are rebuilt

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]

# Qwen2-VL's chat layout, written for this tokenizer (without a default system turn, which would
# only cost the tiny model tokens): images and videos become
# <|vision_start|><|image_pad|><|vision_end|> placeholders that the processor expands.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS_LINES = [
    "You are a helpful assistant.",
    "How many red shapes are in the image? Answer with <answer>N</answer>.",
    "How many blue shapes, green shapes, yellow shapes, circles, squares and triangles are there?",
    "<think>I count the shapes one by one.</think><answer>3</answer>",
    "<answer>0</answer> <answer>1</answer> <answer>2</answer> <answer>4</answer> <answer>5</answer>",
    "<answer>6</answer> <answer>7</answer> <answer>8</answer> <answer>9</answer> <answer>10</answer>",
    "In the figure, find the angle ABC in degrees. The answer is 45 degrees.",
    "Find the length of the side. Choose from options A, B, C, D, E. The answer is (B).",
    "What is the area of the triangle? \\frac{3}{5} \\sqrt{2} \\pi cm^2 x = 7",
    "Locate the raccoon in the image and output its bounding box as [x1, y1, x2, y2].",
    '{"bbox_2d": [12, 40, 96, 120], "label": "raccoon"}',
    "Order the frames of the video by time: C, A, B. First, then, next, finally.",
    "What happens after the man picks up the cup? From 2.5 to 7.0 seconds.",
    "Chart: the value of the bar for 2019 is 1,250 which is 12.5% of the total.",
    "the a an of to in is it that this with for on as by at from be are was were",
    "left right top bottom middle center above below next previous before after",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 25 30 50 100 1000",
]


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS_LINES * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _build_processor(tokenizer, image_pixels: tuple[int, int], video_pixels: tuple[int, int]):
    from transformers import Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": image_pixels[0], "longest_edge": image_pixels[1]}
    )
    video_processor = Qwen2VLVideoProcessor(
        size={"shortest_edge": video_pixels[0], "longest_edge": video_pixels[1]},
        min_pixels=video_pixels[0], max_pixels=video_pixels[1],
    )
    return Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def tiny_config(tokenizer, *, hidden: int = 128, layers: int = 4, init_range: float = 0.08):
    """A complete Qwen2.5-VL config at toy scale (every sub-config spelled out: defaults are 7B)."""
    from transformers import Qwen2_5_VLConfig

    heads = 4
    head_dim = hidden // heads
    # sum(mrope_section) must be head_dim / 2: temporal, height, width rotary sections
    half = head_dim // 2
    mrope = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]  # 32 -> [4, 6, 6]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text = dict(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2,
        max_position_embeddings=2048, initializer_range=init_range, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"], tie_word_embeddings=False,
    )
    vision = dict(
        depth=4, hidden_size=64, intermediate_size=128, num_heads=4, in_channels=3,
        patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
        out_hidden_size=hidden, fullatt_block_indexes=[1, 3], initializer_range=init_range,
        tokens_per_second=2,
    )
    return Qwen2_5_VLConfig(
        text_config=text, vision_config=vision,
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"], tie_word_embeddings=False,
    )


def build_tiny(out_dir: str | Path, *, seed: int = 0, vocab_size: int = 1024) -> Path:
    """Build the tiny model, tokenizer and processor from scratch and save them to `out_dir`.

    Deterministic for a given seed on a given machine. Written to a temporary directory first and
    renamed, so a killed build never leaves a half-written model behind.
    """
    from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(vocab_size)
    processor = _build_processor(
        tokenizer, image_pixels=(28 * 28 * 4, 28 * 28 * 64), video_pixels=(28 * 28 * 4, 28 * 28 * 16)
    )
    config = tiny_config(tokenizer)
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    text = config.text_config  # transformers 5.19 keeps the special ids only here (5.24 mirrors them)
    model.generation_config = GenerationConfig(
        eos_token_id=text.eos_token_id, pad_token_id=text.pad_token_id, bos_token_id=text.bos_token_id,
    )
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=out_dir.parent))
    with quiet_third_party_bars():  # a cache filled on first use: its "Writing model shards" bar is noise in a run's output
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
    (tmp / "mmrlvr_tiny.json").write_text(json.dumps({"version": TINY_VERSION, "seed": seed}))
    if out_dir.exists():
        import shutil

        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def tiny_cache_dir() -> Path:
    root = os.environ.get("MMRLVR_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "mmrlvr"))
    return Path(root) / f"tiny-qwen2.5-vl-v{TINY_VERSION}"


def ensure_tiny(path: str | Path | None = None) -> Path:
    """Return a directory holding the tiny model, building it first if it is missing."""
    path = Path(path) if path is not None else tiny_cache_dir()
    marker = path / "mmrlvr_tiny.json"
    if marker.exists() and json.loads(marker.read_text()).get("version") == TINY_VERSION:
        return path
    return build_tiny(path)
