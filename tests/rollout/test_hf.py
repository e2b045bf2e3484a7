import torch
from PIL import Image

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import model_kwargs, repeat_prompts
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.types import Sample


def _samples():
    q = lambda t: ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]},)  # noqa: E731
    return [
        Sample("a", q("How many red shapes are there in this picture?"), 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),)),
        Sample("b", q("Hi"), 2, images=(Image.new("RGB", (112, 84), (30, 30, 200)),)),  # shorter: left padded
    ]


def test_groups_contiguous_and_vision_tokens_never_sampled(tiny):
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    out = engine.rollout(_samples(), 4, RolloutConfig(max_new_tokens=16, temperature=1.5), seed=0)
    assert [c.sample_index for c in out.completions] == [0] * 4 + [1] * 4
    assert out.completion_ids.shape[0] == 8
    sampled = set(out.completion_ids[out.completion_mask.bool()].tolist())
    assert not sampled & set(engine.suppress_ids)
    # same seed, same completions
    again = engine.rollout(_samples(), 4, RolloutConfig(max_new_tokens=16, temperature=1.5), seed=0)
    assert torch.equal(out.completion_ids, again.completion_ids)
    assert engine.generate(_samples(), 4, RolloutConfig(max_new_tokens=16, temperature=1.5), 0)[0].text == out.completions[0].text


def test_generate_logprobs_equal_teacher_forced_forward(tiny):
    """Sampled tokens' log-probs from generate's own logits == one teacher-forced forward
    (`sampler=multinomial`: the tokens are `generate(do_sample=True)`'s own draws)."""
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    rc = RolloutConfig(max_new_tokens=12, temperature=0.9, sampler="multinomial")
    out = engine.rollout(_samples(), 4, rc, seed=1)
    lp, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, 4), out.completion_ids,
                                out.completion_mask, temperature=0.9, suppress_ids=engine.suppress_ids)
    torch.manual_seed(1)
    gen = model.generate(**model_kwargs(out.prompt_inputs), max_new_tokens=12, num_return_sequences=4,
                         do_sample=True, temperature=0.9, top_k=0, top_p=1.0, suppress_tokens=engine.suppress_ids,
                         eos_token_id=engine.stop_ids, pad_token_id=engine.pad_id,
                         output_logits=True, return_dict_in_generate=True)
    t = out.completion_ids.shape[1]
    assert torch.equal(gen.sequences[:, -gen.sequences.shape[1] + out.prompt_inputs["input_ids"].shape[1]:][:, :t][out.completion_mask.bool()],
                       out.completion_ids[out.completion_mask.bool()])
    logits = torch.stack(gen.logits, 1)[:, :t].float() / 0.9
    logits[..., engine.suppress_ids] = -float("inf")
    ref = torch.log_softmax(logits, -1).gather(-1, out.completion_ids.unsqueeze(-1)).squeeze(-1)
    m = out.completion_mask.bool()
    assert (lp - ref)[m].abs().max().item() < 1e-4


def test_media_encoded_once_per_group_gives_the_same_logprobs_and_gradients(fresh_tiny):
    """Sharing one encoding of a prompt's image across its group is exact, not an approximation."""
    from mmrlvr.data.collate import encode_prompts, pad_right, select_rows
    from mmrlvr.train.logprobs import shared_media_outputs

    model, processor = fresh_tiny
    samples = _samples()
    rep = repeat_prompts(encode_prompts(processor, samples), 3)
    plain = {k: v for k, v in rep.items() if k not in ("_base", "_row_prompt")}
    assert shared_media_outputs(model, rep) is not None and shared_media_outputs(model, plain) is None
    ids, mask = pad_right([[100, 101, 102, 103], [104, 105], [106], [107, 108, 109], [110], [111, 112]], 0)

    def run(inputs, rows):
        model.zero_grad()
        lp, _ = completion_logprobs(model, select_rows(inputs, rows), ids[rows], mask[rows])
        (lp * mask[rows]).sum().backward()
        return lp.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    for rows in ([0, 1, 2, 3, 4, 5], [1, 4, 5]):
        a, ga = run(rep, rows)
        b, gb = run(plain, rows)
        assert torch.allclose(a, b, atol=1e-6)
        assert len(ga) == len(gb) and all(torch.allclose(x, y, atol=1e-5) for x, y in zip(ga, gb))


def _checkpoint_with_generation_config(tiny_dir, tmp_path, **fields):
    """A copy of the tiny checkpoint whose generation_config.json sets `fields`, as Qwen2.5-VL-Instruct's does."""
    import json
    import shutil

    path = tmp_path / "ckpt"
    shutil.copytree(tiny_dir, path)
    gen = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**gen, **fields}))
    return path


def test_sampler_scores_equal_learner_logprobs_despite_checkpoint_generation_config(tiny_dir, tmp_path):
    """The checkpoint asks for repetition_penalty=1.05 (and Qwen's top_k=1/top_p=0.001/temperature=0.1):
    rollouts must ignore all of it, warn once, and draw from exactly the distribution the learner
    computes (checked against the processed scores `generate` sampled from)."""
    import pytest

    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout import hf

    path = _checkpoint_with_generation_config(tiny_dir, tmp_path, repetition_penalty=1.05, do_sample=True,
                                              temperature=0.1, top_k=1, top_p=0.001)
    model, processor = load_policy(str(path))
    assert model.generation_config.repetition_penalty == 1.05
    engine = HFRolloutEngine(model, processor)
    rc = RolloutConfig(max_new_tokens=12, temperature=0.9)
    hf._warned.clear()
    with pytest.warns(UserWarning, match="repetition_penalty=1.05"):
        out = engine.rollout(_samples(), 4, rc, seed=3, return_logprobs=True)
    lp, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, 4), out.completion_ids,
                                out.completion_mask, temperature=0.9, suppress_ids=engine.suppress_ids)
    m = out.completion_mask.bool()
    assert m.sum() > 40  # enough sampled tokens, many of them repeats of prompt tokens
    assert (lp - out.sampler_logprobs)[m].abs().max().item() < 1e-4
    # the checkpoint's own generation_config is untouched, and the warning comes once
    assert model.generation_config.repetition_penalty == 1.05
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.rollout(_samples(), 4, rc, seed=4)
    # had the penalty been applied, the sampler's log-probs would differ by far more than 1e-4:
    with torch.no_grad():
        pen = model.generate(**model_kwargs(out.prompt_inputs), max_new_tokens=12, num_return_sequences=4,
                             do_sample=True, temperature=0.9, top_k=0, top_p=1.0, repetition_penalty=1.05,
                             suppress_tokens=engine.suppress_ids, eos_token_id=engine.stop_ids,
                             pad_token_id=engine.pad_id, output_scores=True, return_dict_in_generate=True)
    t = len(pen.scores)
    new = pen.sequences[:, -t:]
    pen_lp = torch.log_softmax(torch.stack(pen.scores, 1).float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    ids, mask, _, _ = hf.trim_at_stop(new, engine.stop_ids, engine.pad_id)
    lp_pen, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, 4), ids, mask, temperature=0.9,
                                    suppress_ids=engine.suppress_ids)
    assert (lp_pen - pen_lp)[mask.bool()].abs().max().item() > 1e-2


def test_sampler_logprobs_always_come_back_and_match_generates_scores(tiny):
    """Every rollout returns the sampled tokens' log-probs (no flag needed): equal to generate's own
    processed scores (temperature 0.7, suppressed ids at -inf) on every sampled token, 0 on padding."""
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    rc = RolloutConfig(max_new_tokens=10, temperature=0.7, sampler="multinomial")  # generate's own draw below
    # the untrained tiny model never stops by itself: make its most frequent token a stop token too,
    # so completions end at different lengths and there is padding after them
    first = engine.rollout(_samples(), 3, rc, seed=5).completion_ids
    engine.stop_ids = [*engine.stop_ids, int(first.flatten().mode().values)]
    out = engine.rollout(_samples(), 3, rc, seed=5)
    assert out.sampler_logprobs is not None and out.sampler_logprobs.shape == out.completion_ids.shape
    m = out.completion_mask.bool()
    assert (~m).any() and m.any()  # mixed lengths: some padding to check
    assert torch.all(out.sampler_logprobs[~m] == 0) and torch.all(out.sampler_logprobs[m] < 0)
    # the same draw with output_scores: log_softmax of the processed scores at the sampled ids
    from mmrlvr.rollout import hf

    cfg = hf.sampling_config(rc, group_size=3, max_new_tokens=10, stop_ids=engine.stop_ids, pad_id=engine.pad_id,
                             suppress_ids=engine.suppress_ids)
    cfg.update(output_scores=True, return_dict_in_generate=True)
    torch.manual_seed(5)
    model.eval()
    with torch.no_grad(), hf._only(model, cfg):
        ref = model.generate(**model_kwargs(out.prompt_inputs, None), generation_config=cfg)
    new = ref.sequences[:, out.prompt_inputs["input_ids"].shape[1]:]
    scores = torch.log_softmax(torch.stack(ref.scores, 1).float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    t = out.completion_ids.shape[1]
    assert torch.equal(new[:, :t][m], out.completion_ids[m])  # the same tokens were drawn
    assert (scores[:, :t] - out.sampler_logprobs)[m].abs().max().item() < 1e-5
