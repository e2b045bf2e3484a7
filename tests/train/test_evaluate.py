"""Held-out evaluation: the configured reward terms, named metrics, skipped rows, mean@K / pass@K."""

from pathlib import Path

import pytest

from mmrlvr.config import RolloutConfig
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.train.evaluate import at_k, eval_metrics, eval_terms, evaluate, headline_of, summarize
from mmrlvr.types import Sample
from mmrlvr.verifiers.score import InProcessScorer
from mmrlvr.tasks import load_task

USER = f"{Path(__file__).parents[1] / 'e2e' / 'user_verifier.py'}:even_length"


def _s(i, verifier="count", ref=2):
    return Sample(f"s{i}", (), ref, verifier)


def test_each_term_reported_and_headline_named_for_what_it_measures():
    samples = [_s(0), _s(1), _s(2), _s(3)]
    terms = [("count", 1.0), ("format", 0.5)]
    scores = [{"count": 1.0, "format": 1.0}, {"count": 0.0, "format": 1.0},
              {"count": 1.0, "format": 0.0}, {"count": 0.0, "format": 0.0}]
    parts = [{"count": {}, "format": {"think": 1.0}}, {"count": {}, "format": {"think": 0.0}},
             {"count": {}, "format": {"think": 1.0}}, {"count": {}, "format": {"think": 1.0}}]
    m = summarize(samples, scores, parts, terms)
    # rewards per row: 1.5, 0.5, 1.0, 0.0 -> mean 0.75; count passes 2 of 4; format 2 of 4
    assert m["reward"] == pytest.approx(0.75)
    assert m["accuracy"] == pytest.approx(0.5) and m["count"] == pytest.approx(0.5)
    assert m["format"] == pytest.approx(0.5) and m["format/think"] == pytest.approx(0.75)
    assert m["score"] == pytest.approx(0.5)  # the headline: count's pass/fail, not the reward
    assert "mean_iou" not in m
    names = eval_metrics("counting", {"metrics": {k: v for k, v in m.items() if k != "score"}})
    assert {"eval/counting/reward", "eval/counting/accuracy", "eval/counting/format/think"} <= set(names)


def test_iou_is_mean_iou_not_accuracy_and_user_terms_have_no_headline():
    samples = [_s(0, "iou"), _s(1, "iou")]
    m = summarize(samples, [{"iou": 0.25}, {"iou": 0.75}], [{"iou": {}}, {"iou": {}}], [])
    assert m["mean_iou"] == pytest.approx(0.5) and "accuracy" not in m
    assert headline_of("iou") == "mean_iou" and headline_of("count") == "accuracy"
    assert headline_of(USER) is None
    # a user term alone: the headline score is the weight-normalised reward, 2 * 0.5 / 2
    m = summarize([_s(0)], [{USER: 0.5}], [{USER: {"length": 3.0}}], [(USER, 2.0)])
    assert m["reward"] == pytest.approx(1.0) and m["score"] == pytest.approx(0.5)
    assert m["even_length/length"] == pytest.approx(3.0) and "accuracy" not in m


def test_eval_terms_prefer_eval_verifiers_then_rewards():
    from mmrlvr.config import RewardTerm

    rewards = [RewardTerm(USER, 1.0), RewardTerm("count", 0.5)]
    assert eval_terms(rewards, []) == [(USER, 1.0), ("count", 0.5)]
    assert eval_terms(rewards, ["count"]) == [("count", 1.0)]
    assert eval_terms([], []) == []


def test_at_k_by_hand():
    # row 1: 2 of 4 right -> mean 0.5, pass 1; row 2: none -> 0, 0; row 3: all -> 1, 1
    mean, passed = at_k([[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]])
    assert mean == pytest.approx(0.5) and passed == pytest.approx(2 / 3)


@pytest.fixture(scope="module")
def engine(tiny):
    model, processor = tiny
    return HFRolloutEngine(model, processor)


def test_configured_user_reward_is_what_eval_measures(engine):
    """The issue's case: a custom reward; eval must report it, not only the task's verifier."""
    rows = load_task("counting", "eval", 6, 0)
    scorer = InProcessScorer()
    sampling = RolloutConfig(max_new_tokens=6)
    res = evaluate(engine, rows, scorer, sampling, batch_size=4, terms=[(USER, 1.0)])
    texts = [e["completion"] for e in res["examples"]]
    assert res["n"] == 6 and "even_length" in res["metrics"] and "accuracy" not in res["metrics"]
    by_hand = [float(len(t) % 2 == 0) for t in texts]
    assert [e["scores"][USER] for e in res["examples"]] == by_hand
    default = evaluate(engine, rows, scorer, sampling, batch_size=4)  # each sample's own: count
    assert "accuracy" in default["metrics"] and "even_length" not in default["metrics"]


def test_pass_at_k_is_at_least_mean_at_k_on_the_tiny_model(engine):
    rows = load_task("counting", "eval", 6, 0)
    res = evaluate(engine, rows, InProcessScorer(), RolloutConfig(max_new_tokens=6), batch_size=8,
                   terms=[(USER, 1.0)], k=4)
    assert res["pass@4"] >= res["mean@4"]
    assert res["pass@4"] > 0.0  # the untrained model's lengths vary, so some sample is even


def test_rows_whose_image_cannot_be_read_are_skipped_with_their_index(engine, tmp_path):
    pytest.importorskip("mmrlvr.data.media", reason="path images are decoded by mmrlvr.data.media")
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a png")
    rows = list(load_task("counting", "eval", 3, 0))
    rows[1] = Sample("bad", rows[1].messages, 1, "count", images=(str(bad),))
    res = evaluate(engine, rows, InProcessScorer(), RolloutConfig(max_new_tokens=4), batch_size=3)
    assert res["n"] == 2 and [e["id"] for e in res["examples"]] == [rows[0].id, rows[2].id]
    assert [s["row"] for s in res["skipped"]] == [1]
    assert res["skipped"][0]["reason"]


def test_the_headline_is_named_for_what_it_measures():
    """accuracy only for pass/fail verifiers; IoU, tIoU by name; a sum of plain scores is a reward."""
    from mmrlvr.train.evaluate import headline_name, said
    from mmrlvr.types import Sample

    s = Sample("a", (), 3, verifier="iou")
    assert headline_name([], [s]) == "mean_iou" and said("mean_iou") == "mean IoU"
    assert headline_name([("count", 1.0)], [s]) == "accuracy"
    assert headline_name([("tiou", 1.0)], [s]) == "mean_tiou" and said("mean_tiou") == "mean tIoU"
    assert headline_name([("format", 1.0)], [s]) == "reward" and said("reward") == "mean reward"
