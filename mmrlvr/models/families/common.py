"""Shared parts of the tiny family builders: the offline tokenizer and the atomic save.

Every family gets the same byte-level BPE (trained here on `tiny._CORPUS_LINES`) with its own
special tokens and chat template, so no tokenizer is downloaded; ids differ from the real
checkpoints, so code takes ids from the tokenizer and the config, never from constants.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

MARKER = "mmrlvr_tiny.json"


def train_tokenizer(special_tokens: Sequence[str], *, chat_template: str, vocab_size: int = 1024, **named):
    """A `PreTrainedTokenizerFast` over the project corpus with `special_tokens` first (ids 0..k-1).

    `named` are the tokenizer's named tokens (eos_token=..., pad_token=..., extra_special_tokens=...).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from mmrlvr.models.tiny import _CORPUS_LINES

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS_LINES * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **named)
    fast.chat_template = chat_template
    return fast


def token_ids(tokenizer, tokens: Sequence[str]) -> dict[str, int]:
    return {t: tokenizer.convert_tokens_to_ids(t) for t in tokens}


def set_generation_ids(model, *, bos: int, eos: int | list[int], pad: int) -> None:
    """bos/eos/pad on the top-level config, the text config and the generation config.

    Some transformers versions read them from `text_config` only (5.19 for Qwen2.5-VL), others
    from the top level; writing both keeps the saved directory loadable by either."""
    from transformers import GenerationConfig

    for cfg in (model.config, model.config.get_text_config()):
        cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = bos, eos, pad
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)


def save_atomic(out_dir: str | Path, model, processor, marker: dict) -> Path:
    """Write model + processor to a temporary sibling and rename it: a killed build leaves nothing."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=out_dir.parent))
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps(marker))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir
