"""Demonstration bootstrapping: schedule, seeded draw, choice of solved examples, prompt layout
through the tiny model's real processor and chat template, and what the loss covers."""

from __future__ import annotations

import random

import pytest
import torch
from PIL import Image

from mmrlvr.data.collate import encode_prompts, pad_right
from mmrlvr.methods.demos.source import DemoPool, DemoStrategy, demo_answer, demo_probability, wants_demos, with_demos
from mmrlvr.types import Sample
from tasks import load_task

Q = "How many red shapes are in the image?"


def counting_like(i: int, size: tuple[int, int], ref: int, target: str | None = None, verifier: str = "count"):
    content = [{"type": "image"}, {"type": "text", "text": f"{Q} ({i})"}]
    img = Image.new("RGB", size, (30 * i % 255, 90, 10))
    return Sample(f"s{i}", ({"role": "user", "content": content},), ref, verifier, images=(img,), target=target)


def test_schedule_falls_linearly_to_zero():
    # p0 .5 over 100 steps: .5 at 0, .5 * (1 - 25/100) = .375 at 25, 0 at 100 and after
    assert [demo_probability(t, 0.5, 100) for t in (0, 25, 99, 100, 150)] == pytest.approx([0.5, 0.375, 0.005, 0, 0])
    assert demo_probability(5, p0=0.4, anneal_steps=10) == pytest.approx(0.2)  # .4 * (1 - 5/10)
    with pytest.raises(ValueError, match="anneal_steps"):
        demo_probability(0, 0.5, 0)


def test_draw_is_seeded_per_prompt_and_has_rate_p():
    ids = [f"q{i}" for i in range(4000)]
    hits = [wants_demos(3, 7, i, 0.3) for i in ids]
    assert abs(sum(hits) / len(ids) - 0.3) < 0.03  # binomial sd sqrt(.3 * .7 / 4000) = .007
    assert hits == [wants_demos(3, 7, i, 0.3) for i in ids]  # same seed, step, id: same draw
    assert hits != [wants_demos(4, 7, i, 0.3) for i in ids]  # another seed: other draws
    assert hits != [wants_demos(3, 8, i, 0.3) for i in ids]  # another step: other draws
    assert not any(wants_demos(3, 7, i, 0.0) for i in ids[:50])
    assert all(wants_demos(3, 7, i, 1.0) for i in ids[:50])


def test_pool_chooses_solved_examples_of_the_same_task_never_the_prompt():
    train = load_task("counting", "train", 12, seed=0)
    other = Sample("other", train[0].messages, "x", verifier="exact", images=train[0].images)
    # a flawed teacher (says 9, the board has ref) must not be shown: its reference answer is
    flawed = Sample("flawed", train[0].messages, 2, "count", images=train[0].images, target="<answer>9</answer>")
    pool = DemoPool(train + [other, flawed])
    for s in train:
        got = pool.choose(s, 3, random.Random(0))
        assert len(got) == 3
        for d, text in got:
            assert d.id != s.id and d.verifier == "count"
            assert text == (d.target if int(d.meta["teacher"]) == d.reference else f"<answer>{d.reference}</answer>")
    assert demo_answer(flawed) == "<answer>2</answer>"
    assert demo_answer(train[0]) is not None
    # k larger than the pool of other solved rows: all of them, once each
    assert sorted(d.id for d, _ in pool.choose(train[0], 50, random.Random(1))) == sorted(
        s.id for s in train[1:] + [flawed])
    # a row nothing can solve is never shown
    unsolvable = Sample("bad", train[0].messages, "not a number", "count", images=train[0].images)
    assert DemoPool([train[0], unsolvable]).choose(train[1], 2, random.Random(0)) == [(train[0], pool.answer(train[0]))]


def test_layout_demos_are_turns_before_the_question(tiny):
    _, processor = tiny
    d1, d2 = counting_like(1, (84, 56), 3), counting_like(2, (112, 56), 0, target="<answer>0</answer>")
    q = counting_like(3, (56, 56), 5)
    shown = with_demos(q, [(d1, "<answer>3</answer>"), (d2, "<answer>0</answer>")])
    assert shown.id == q.id and shown.meta["demo_ids"] == ["s1", "s2"] and q.meta == {}
    assert [m["role"] for m in shown.messages] == ["user", "assistant", "user", "assistant", "user"]
    text = processor.apply_chat_template(list(shown.messages), add_generation_prompt=True, tokenize=False)
    vis = "<|vision_start|><|image_pad|><|vision_end|>"
    assert text == (
        f"<|im_start|>user\n{vis}{Q} (1)<|im_end|>\n<|im_start|>assistant\n<answer>3</answer><|im_end|>\n"
        f"<|im_start|>user\n{vis}{Q} (2)<|im_end|>\n<|im_start|>assistant\n<answer>0</answer><|im_end|>\n"
        f"<|im_start|>user\n{vis}{Q} (3)<|im_end|>\n<|im_start|>assistant\n"
    )
    enc = encode_prompts(processor, [shown])
    # media in chat order: each image's grid equals encoding it alone, demo 1, demo 2, question
    alone = [encode_prompts(processor, [s])["image_grid_thw"][0] for s in (d1, d2, q)]
    assert torch.equal(enc["image_grid_thw"], torch.stack(alone))
    assert len({tuple(g.tolist()) for g in alone}) == 3  # three different sizes: an order swap shows
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((enc["input_ids"] == pad).sum()) == sum(int(g.prod()) // 4 for g in alone)  # merge 2x2
    assert enc["_n_images"] == [3]


def test_loss_covers_only_the_completion(tiny):
    """Log-probs the learner computes for a demo'd prompt are those of the answer tokens after the
    question, not of the identical answer text in the demonstration turn."""
    from mmrlvr.train.logprobs import completion_logprobs

    model, processor = tiny
    d = counting_like(1, (56, 56), 4)
    q = counting_like(2, (56, 56), 4)
    shown = with_demos(q, [(d, "<answer>4</answer>")])
    tok = processor.tokenizer
    comp = tok("<answer>4</answer><|im_end|>", add_special_tokens=False)["input_ids"]
    inputs = encode_prompts(processor, [shown])
    ids, mask = pad_right([comp], tok.pad_token_id)
    with torch.no_grad():
        logp, _ = completion_logprobs(model, inputs, ids, mask)
        assert logp.shape == (1, len(comp))
        # the same by hand: one forward of prompt + completion; the loss positions are the last
        # len(comp) tokens, each predicted from the position before it
        full = torch.cat([inputs["input_ids"], ids], dim=1)
        out = model(input_ids=full, attention_mask=torch.ones_like(full), pixel_values=inputs["pixel_values"],
                    image_grid_thw=inputs["image_grid_thw"],
                    mm_token_type_ids=torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(ids)], dim=1))
    lp = torch.log_softmax(out.logits[0].float(), -1)
    n_prompt = inputs["input_ids"].shape[1]
    answer_pos = list(range(n_prompt, n_prompt + len(comp)))
    expected = torch.stack([lp[t - 1, full[0, t]] for t in answer_pos])
    assert torch.allclose(logp[0], expected, atol=1e-4)
    # the demonstration's identical answer sits in the prompt, outside the loss positions
    demo_ans = tok("<answer>4</answer>", add_special_tokens=False)["input_ids"]
    prompt = inputs["input_ids"][0].tolist()
    starts = [i for i in range(n_prompt) if prompt[i : i + len(demo_ans)] == demo_ans]
    assert len(starts) == 1 and starts[0] + len(demo_ans) <= n_prompt
    decoded = tok.decode(full[0, answer_pos].tolist())
    assert decoded == "<answer>4</answer><|im_end|>"


def test_strategy_group_consistent_resumable_and_annealed():
    train = load_task("counting", "train", 16, seed=1)
    prompts = train[:8]
    strat = DemoStrategy(train, seed=5, p0=0.5, anneal_steps=10, k=2)
    first = strat(prompts, 0)
    shown = [s for s in first if "demo_ids" in s.meta]
    assert 0 < len(shown) < 8 and strat.metrics() == {"demos/frac": len(shown) / 8}
    for s in shown:
        assert len(s.meta["demo_ids"]) == 2 and s.id not in s.meta["demo_ids"]
        assert len(s.images) == 3 and len(s.messages) == 5
    # a fresh strategy (a resumed run) draws exactly the same prompts and demonstrations
    again = DemoStrategy(train, seed=5, p0=0.5, anneal_steps=10, k=2)(prompts, 0)
    assert [s.meta.get("demo_ids") for s in again] == [s.meta.get("demo_ids") for s in first]
    assert [s.messages for s in again] == [s.messages for s in first]
    # at and after anneal_steps nobody gets demos
    assert all("demo_ids" not in s.meta for s in strat(prompts, 10))
    assert strat.metrics() == {"demos/frac": 0.0}


@pytest.mark.parametrize("kwargs, word", [({"p0": 1.5}, "p0"), ({"k": 0}, "k="), ({"anneal_steps": 0}, "anneal")])
def test_strategy_bad_settings(kwargs, word):
    with pytest.raises(ValueError, match=word):
        DemoStrategy([], 0, **kwargs)


def test_demo_source_counts_every_take_of_a_step_and_looks_ahead_without_moving():
    """The loop's wrapper: demos drawn on what the stream hands out; `demos/frac` over all of a
    step's takes (dynamic sampling's extra rounds); a look-ahead copy changes nothing."""
    import copy

    from mmrlvr.methods.demos.source import DemoSource
    from mmrlvr.data.sources import SeededStream

    train = load_task("counting", "train", 16, seed=1)
    src = DemoSource(SeededStream(train, 2), DemoStrategy(train, seed=5, p0=0.6, anneal_steps=10, k=1))
    a, b = src.take(5, 1), src.take(3, 1)
    shown = [("demo_ids" in s.meta) for s in a + b]
    # p_1 = 0.6 * 0.9 = 0.54, each prompt its own seeded draw
    assert shown == [wants_demos(5, 1, s.id, 0.54) for s in a + b] and 0 < sum(shown) < 8
    assert src.metrics() == {"demos/frac": sum(shown) / 8}  # both takes, not only the last (3)
    ahead = copy.copy(src).take(4, 2)
    assert src.pos == 8 and src.metrics() == {"demos/frac": sum(shown) / 8}
    nxt = src.take(4, 2)
    assert [s.id for s in nxt] == [s.id for s in ahead] and [s.messages for s in nxt] == [s.messages for s in ahead]
    assert src.metrics()["demos/frac"] == sum("demo_ids" in s.meta for s in nxt) / 4  # a new step starts over
