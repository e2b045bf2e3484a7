"""Each reward term reports its own verifier failures: a second term that breaks must show in the
metrics even though `verifier/failed_frac` (over every sampling round) reads the first term."""

from mmrlvr.train.rewards import score_completions
from mmrlvr.types import Completion, Sample, Verdict
from mmrlvr.verifiers.base import VERIFIER_FAILED


def _scorer(spec, texts, samples):
    # "first" scores 1 on texts that contain "4", never fails; "second" (a format check) fails
    # outright on texts longer than 3 characters and otherwise scores 0.5
    if spec == "first":
        return [Verdict(1.0 if "4" in t else 0.0) for t in texts]
    return [Verdict(0.0, f"{VERIFIER_FAILED} boom") if len(t) > 3 else Verdict(0.5) for t in texts]


def test_every_term_reports_its_own_failures_with_mixed_lengths():
    samples = [Sample(id=f"p{i}", messages=(), reference="4") for i in range(2)]
    texts = ["4", "44444", "x", "4x", "yyyy", "4", "zzzzzzz", "44"]  # 2 prompts x G = 4, lengths 1-7
    completions = [Completion(i // 4, t, list(range(len(t))), False) for i, t in enumerate(texts)]
    rewards, metrics, verdicts = score_completions(completions, samples, 4, [("first", 1.0), ("second", 2.0)], _scorer)
    # "second" fails on "44444", "yyyy", "zzzzzzz": 3 of 8; "first" never fails
    assert metrics["verifier/failed_frac/second"] == 3 / 8
    assert metrics["verifier/failed_frac/first"] == 0.0
    # rewards: first (1 if "4") + 2 x second (0.5 unless failed, then 0)
    assert rewards.tolist() == [[2.0, 1.0, 1.0, 2.0], [0.0, 2.0, 0.0, 2.0]]
    assert [v.score for v in verdicts] == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]  # the first term's
