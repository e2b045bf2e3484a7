"""Which of a checkpoint's generation settings rollouts report as ignored, and which ids stop a
completion (`overridden_generation_fields`, `stop_token_ids`)."""

from __future__ import annotations

from types import SimpleNamespace

from transformers import GenerationConfig

from mmrlvr.config import RolloutConfig
from mmrlvr.rollout.hf import overridden_generation_fields, stop_token_ids


def test_sampling_fields_count_only_when_the_checkpoint_samples():
    # Qwen2.5-VL-Instruct's shipped values, but greedy: temperature / top-k / top-p never apply
    greedy = GenerationConfig(do_sample=False, temperature=0.1, top_k=1, top_p=0.001)
    assert overridden_generation_fields(greedy, RolloutConfig()) == {}
    sampling = GenerationConfig(do_sample=True, temperature=0.1, top_k=1, top_p=0.001, repetition_penalty=1.05)
    assert overridden_generation_fields(sampling, RolloutConfig(temperature=0.9, top_k=0, top_p=1.0)) == {
        "temperature": 0.1, "top_k": 1, "top_p": 0.001, "repetition_penalty": 1.05}


def test_sampling_fields_equal_to_the_rollouts_are_not_reported():
    same = GenerationConfig(do_sample=True, temperature=0.9, top_k=20, top_p=0.8)
    assert overridden_generation_fields(same, RolloutConfig(temperature=0.9, top_k=20, top_p=0.8)) == {}
    assert overridden_generation_fields(same, RolloutConfig(temperature=0.9, top_k=20, top_p=0.9)) == {"top_p": 0.8}


def test_neutral_and_empty_values_are_not_reported():
    neutral = SimpleNamespace(bad_words_ids=[], sequence_bias={}, repetition_penalty=1.0, num_beams=1, min_p=None)
    assert overridden_generation_fields(neutral, RolloutConfig()) == {}
    assert overridden_generation_fields(None, RolloutConfig()) == {}
    assert overridden_generation_fields(SimpleNamespace(bad_words_ids=[[3]], num_beams=2), RolloutConfig()) == {
        "bad_words_ids": [[3]], "num_beams": 2}


class _Tokenizer:
    def __init__(self, vocab):
        self._vocab = vocab

    def get_vocab(self):
        return self._vocab


def test_every_eos_id_stops_and_qwens_end_tokens_are_added_once():
    tok = _Tokenizer({"<|im_end|>": 11, "<|endoftext|>": 12, "a": 1})
    # Gemma-style: two eos ids, both stop
    assert stop_token_ids(tok, SimpleNamespace(eos_token_id=[5, 106])) == [5, 106, 11, 12]
    assert stop_token_ids(tok, SimpleNamespace(eos_token_id=11)) == [11, 12]  # no duplicate
    assert stop_token_ids(tok, SimpleNamespace(eos_token_id=None)) == [11, 12]
    assert stop_token_ids(_Tokenizer({}), None) == []
