"""TimeZero's and Temporal-R1's tIoU rewards (re-stated in rewards.py) against our `tiou` on segments
written as models write them (`temporal_cases.json`): wherever a peer reads the segment, our tIoU equals
its score; every difference is listed with its reason in docs/reference/verifiers.md, and we never pay
more than both peers except where the reference says the difference is ours on purpose."""

import pytest

from tests.verifiers.peers import regenerate_rewards
from tests.verifiers.peers.reward_suite import HERE, agrees, documented, load, measure, paid_more

AGREEMENT_FLOOR = 19  # of 28, measured when the suite came in


@pytest.fixture(scope="module")
def results():
    return measure("temporal")


def test_the_cases_name_the_peers_their_commits_and_licences():
    src = load("temporal")["source"]
    assert src["TimeZero"]["repo"] == "https://github.com/www-Ye/TimeZero" and "Apache-2.0" in src["TimeZero"]["licence"]
    assert src["Temporal-R1"]["repo"] == "https://github.com/appletea233/Temporal-R1"
    assert all(len(src[p]["commit"]) == 40 for p in ("TimeZero", "Temporal-R1"))
    notice = (HERE / "NOTICE").read_text()
    assert "TimeZero" in notice and "Temporal-R1" in notice


def test_the_stored_peer_scores_are_what_the_peer_rules_give_now():
    assert regenerate_rewards.main(["--check"]) == 0


def test_our_tiou_equals_each_peers_wherever_it_reads_the_segment(results):
    differ = {k for k, (peers, ours, _) in results.items() if not agrees(peers, ours)}
    for peer in ("TimeZero", "Temporal-R1"):
        read = [k for k, (peers, _, _) in results.items() if peers[peer] is not None and k not in differ]
        assert len(read) >= 5, peer
    assert len(results) - len(differ) >= AGREEMENT_FLOOR
    assert differ - set(documented("temporal")) == set(), "differences not in docs/reference/verifiers.md"


def test_no_documented_difference_is_stale(results):
    stale = {k for k in documented("temporal") if k not in results or agrees(*results[k][:2])}
    assert stale == set(), "listed in docs/reference/verifiers.md but now agreeing (or gone): drop them"


def test_we_never_pay_more_than_the_peers_unless_ours_on_purpose(results):
    reasons = documented("temporal")
    paid = [k for k, (peers, ours, _) in results.items() if paid_more(peers, ours)]
    assert paid and all(reasons.get(k, "").startswith("ours on purpose") for k in paid)
