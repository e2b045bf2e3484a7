"""arrol's head at test time: answer keys and weighted choices by hand, head_best@K / head_vote@K on
the tiny model against an independent rollout of the same candidates, and the one-line refusal when
the checkpoint holds no head."""

import json
from pathlib import Path

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.methods.arrol.eval import answer_key, head_at_k, headline_scores, load_head, weighted_choices
from mmrlvr.methods.arrol.head import QualityHead
from mmrlvr.verifiers.score import make_scorer

EVEN = f"{Path(__file__).resolve().parents[2] / 'e2e' / 'user_verifier.py'}:even_length"  # mixed scores


def test_answer_key_reads_the_last_answer_tag():
    assert answer_key("x <answer>3</answer> then <answer> 4 </answer>") == "4"
    assert answer_key("  five \n") == "five"


def test_weighted_choices_by_hand():
    # keys a, b, a, c with weights 0.1, 0.6, 0.3, 0.5: best single is b (index 1);
    # sums a 0.4, b 0.6, c 0.5 -> b wins the vote too
    assert weighted_choices(["a", "b", "a", "c"], torch.tensor([0.1, 0.6, 0.3, 0.5])) == (1, 1)
    # weights 0.4, 0.6, 0.4, 0.5: best single b (1), sums a 0.8 > c 0.5 > b 0.6 -> vote a, first index 0
    assert weighted_choices(["a", "b", "a", "c"], torch.tensor([0.4, 0.6, 0.4, 0.5])) == (1, 0)
    # ties go to the earlier candidate
    assert weighted_choices(["x", "y"], torch.tensor([0.5, 0.5])) == (0, 0)


def test_load_head_refuses_a_checkpoint_without_one(tmp_path):
    with pytest.raises(ValueError, match="eval_weighting=head: .* holds no trained arrol head"):
        load_head(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"step": 1}))
    with pytest.raises(ValueError, match="holds no trained arrol head"):
        load_head(tmp_path)


def test_head_at_k_picks_the_candidates_the_head_weighs(tiny):
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    samples = list(load_task("counting", "eval", 3, 0))
    k, p, rc = 4, 2, RolloutConfig(max_new_tokens=6, temperature=1.0)
    head = QualityHead()
    head._build(model.config.get_text_config().hidden_size)
    with torch.no_grad():
        head.w.copy_(torch.randn(head.w.shape[0], generator=torch.Generator().manual_seed(0)))
    weights = []
    score = head.score
    head.score = lambda h: weights.append(score(h)) or weights[-1]
    scorer, terms = make_scorer(10.0, 0, [EVEN]), [(EVEN, 1.0)]
    spread = []
    try:
        got = head_at_k(engine, head, samples, rc, k, p, seed=5, max_new_tokens=6, terms=terms, scorer=scorer)
        expect_best, expect_vote, expect_plain = [], [], []
        for i, s in enumerate(samples):  # the same candidates from a plain rollout with the same seed
            texts = [c.text for c in engine.rollout([s], k, rc, seed=5 + 1 + i, max_new_tokens=6).completions]
            heads = headline_scores(texts, [s] * k, terms, scorer)
            spread.append(len(set(heads)) > 1)
            best, vote = weighted_choices([answer_key(t) for t in texts], weights[i])
            expect_best.append(heads[best])
            expect_vote.append(heads[vote])
            expect_plain.append(heads[weighted_choices([answer_key(t) for t in texts], torch.ones(k))[1]])
    finally:
        scorer.close()
    assert got == {"head_best@4": sum(expect_best) / 3, "head_vote@4": sum(expect_vote) / 3,
                   "vote@4": sum(expect_plain) / 3}
    assert len(weights) == 3 and all(w.shape == (k,) for w in weights)
    assert any(spread)  # the candidates' scores differ: which one the head picks matters
