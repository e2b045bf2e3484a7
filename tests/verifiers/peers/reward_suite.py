"""The grounding and temporal peer cases through our verifiers, and the documented differences (shared by
`test_grounding_peer.py` and `test_temporal_peer.py`; `python -m tests.verifiers.peers.reward_suite`
prints every difference)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mmrlvr.types import Sample
from mmrlvr.verifiers.base import resolve_verifier, safe_verify

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[2] / "docs" / "reference" / "verifiers.md"
SUITES = {"grounding": (HERE / "grounding_cases.json", "iou"), "temporal": (HERE / "temporal_cases.json", "tiou")}
TOL = 1e-6


def load(suite: str) -> dict:
    return json.loads(SUITES[suite][0].read_text())


def measure(suite: str) -> dict[str, tuple[dict, float, str]]:
    """{case id: (peer scores, our score, our reason)}; a peer's None means it read nothing."""
    path, name = SUITES[suite]
    out = {}
    for c in load(suite)["cases"]:
        sample = Sample(c["id"], (), c["reference"], name, meta=c.get("meta") or {})
        v = safe_verify(resolve_verifier(name), c["completion"], sample)
        out[c["id"]] = (c["peers"], v.score, v.reason)
    return out


def agrees(peers: dict, ours: float) -> bool:
    """Ours equals every peer that reads the answer; where none reads it, ours is 0 as theirs is."""
    read = [p for p in peers.values() if p is not None]
    return all(abs(p - ours) <= TOL for p in read) if read else ours == 0.0


def paid_more(peers: dict, ours: float) -> bool:
    """We pay more than any peer: a reward a policy could learn to hack unless it is ours on purpose."""
    return ours > max((p or 0.0) for p in peers.values()) + TOL


def documented(suite: str) -> dict[str, str]:
    """{case id: reason} from the rows `| `suite:id` | reason |` of the verifier reference."""
    rows = re.findall(rf"^\| `{suite}:(\w+)` \| (.+?) \|$", DOC.read_text(), re.M)
    return dict(rows)


if __name__ == "__main__":
    for suite in SUITES:
        res = measure(suite)
        differ = [k for k, (p, s, _) in res.items() if not agrees(p, s)]
        print(f"{suite}: {len(res) - len(differ)} of {len(res)} agree")
        for k in differ:
            print(f"  {k}: peers {res[k][0]} ours {res[k][1]:.6f} ({res[k][2]})")
