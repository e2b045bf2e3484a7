"""After a short warm start on counting, the count itself depends on the image more than the
format tokens around it: the visual dependency signal tells perception tokens from boilerplate."""

import pytest
import torch

from mmrlvr.data.collate import encode_prompts, pad_right
from mmrlvr.tasks import load_task
from mmrlvr.methods.token_weighting.signals import black_fill, compute_signals
from mmrlvr.train.sft import target_ids, warm_start


@pytest.mark.slow
def test_count_tokens_depend_on_the_image_more_than_format_tokens(fresh_tiny):
    model, processor = fresh_tiny
    torch.manual_seed(0)
    # smaller boards (at most 3 red among 6 shapes) and a right teacher: the count is read from
    # the image within ~150 steps (before that, it is guessed from priors and depends on nothing)
    args = dict(max_red=3, max_total=6, flaw_prob=0.0)
    warm_start(model, processor, load_task("counting", "train", 512, 0, **args), steps=160, lr=2e-3, batch_size=16, seed=0)
    model.eval()
    samples = load_task("counting", "eval", 32, 0, **args)
    tok = processor.tokenizer
    ids, mask = pad_right(target_ids(tok, samples), tok.pad_token_id)  # "<answer>N</answer><|im_end|>"
    dep = compute_signals(model, encode_prompts(processor, samples), ids, mask, ["visual_dependency"],
                          fill=black_fill(processor), seed=0)["visual_dependency"]
    prefix = len(tok("<answer>", add_special_tokens=False)["input_ids"])
    count_pos, format_pos = [], []
    for i, s in enumerate(samples):
        n_count = len(tok(str(s.meta["teacher"]), add_special_tokens=False)["input_ids"])
        assert tok.decode(ids[i, prefix : prefix + n_count]) == str(s.meta["teacher"])
        count_pos += [(i, j) for j in range(prefix, prefix + n_count)]
        format_pos += [(i, j) for j in range(prefix)]
    count_dep = torch.stack([dep[p] for p in count_pos]).mean().item()
    format_dep = torch.stack([dep[p] for p in format_pos]).mean().item()
    print(f"visual dependency: count tokens {count_dep:.4f}, <answer> tokens {format_dep:.4f}")
    assert count_dep > format_dep, (count_dep, format_dep)
