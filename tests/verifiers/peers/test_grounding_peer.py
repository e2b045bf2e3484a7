"""VLM-R1's `iou_reward` (re-stated in rewards.py) against our `iou` on boxes written as models write
them (`grounding_cases.json`): wherever the peer reads the box, our IoU equals theirs; every difference
is listed with its reason in docs/reference/verifiers.md, and we never pay more than the peer except
where the reference says the difference is ours on purpose."""

import pytest

from mmrlvr.types import Sample
from mmrlvr.verifiers.base import resolve_verifier, safe_verify
from tests.verifiers.peers import regenerate_rewards
from tests.verifiers.peers.reward_suite import HERE, agrees, documented, load, measure, paid_more

AGREEMENT_FLOOR = 23  # of 35, measured when the suite came in


@pytest.fixture(scope="module")
def results():
    return measure("grounding")


def test_the_cases_name_the_peer_its_commit_and_licence():
    src = load("grounding")["source"]["VLM-R1"]
    assert src["repo"] == "https://github.com/om-ai-lab/VLM-R1" and len(src["commit"]) == 40
    assert "Apache-2.0" in src["licence"] and "qwen_module.py" in src["path"]
    assert "VLM-R1" in (HERE / "NOTICE").read_text()


def test_the_stored_peer_scores_are_what_the_peer_rule_gives_now():
    assert regenerate_rewards.main(["--check"]) == 0


def test_our_iou_equals_the_peers_wherever_it_reads_the_box(results):
    differ = {k for k, (peers, ours, _) in results.items() if not agrees(peers, ours)}
    both_read = [k for k, (peers, _, _) in results.items() if peers["VLM-R1"] is not None and k not in differ]
    assert len(results) - len(differ) >= AGREEMENT_FLOOR and len(both_read) >= 16
    assert differ - set(documented("grounding")) == set(), "differences not in docs/reference/verifiers.md"


def test_no_documented_difference_is_stale(results):
    stale = {k for k in documented("grounding") if k not in results or agrees(*results[k][:2])}
    assert stale == set(), "listed in docs/reference/verifiers.md but now agreeing (or gone): drop them"


def test_we_never_pay_more_than_the_peer_unless_ours_on_purpose(results):
    reasons = documented("grounding")
    paid = [k for k, (peers, ours, _) in results.items() if paid_more(peers, ours)]
    assert paid and all(reasons.get(k, "").startswith("ours on purpose") for k in paid)


def test_with_a_threshold_we_pay_one_exactly_where_the_peers_iou_reaches_it(results):
    """The peer's commented-out variant pays 1 for IoU over 0.5: ours with `threshold: 0.5` is that
    indicator of the same IoU wherever both read the box (no case sits at exactly 0.5)."""
    cases = {c["id"]: c for c in load("grounding")["cases"]}
    both = [k for k, (peers, ours, _) in results.items() if peers["VLM-R1"] is not None and agrees(peers, ours)]
    for k in both:
        c = cases[k]
        sample = Sample(k, (), c["reference"], "iou", meta={**c["meta"], "threshold": 0.5})
        v = safe_verify(resolve_verifier("iou"), c["completion"], sample)
        assert v.score == float(c["peers"]["VLM-R1"] > 0.5), k
