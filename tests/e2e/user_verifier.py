"""A user verifier in a plain file, named in a config as `path/to/user_verifier.py:even_length`.

It rewards completions with an even number of characters: an untrained policy gets mixed groups
from it, so a few RL steps have signal.
"""

from mmrlvr.types import Verdict


def even_length(completion: str, sample) -> Verdict:
    even = len(completion) % 2 == 0
    return Verdict(float(even), "even length" if even else "odd length", {"length": float(len(completion))})


def even_length_odd_ids(completion: str, sample) -> Verdict:
    """`even_length` on samples whose id ends in an odd digit, 0 on the others: half the prompts
    always give an all-equal group, so dynamic sampling is sure to drop and resample."""
    if sample.id[-1:].isdigit() and int(sample.id[-1]) % 2 == 0:
        return Verdict(0.0, "even id: constant reward")
    return even_length(completion, sample)


def length_thirds(completion: str, sample) -> Verdict:
    """Partial credit from the length: 0, 0.5 or 1 (len % 3 / 2), for thresholds on scores."""
    return Verdict((len(completion) % 3) / 2, "length mod 3")


def breaks_on_odd_length(completion: str, sample) -> Verdict:
    """A broken plug-in: raises on completions of odd length (a verifier failure, scored 0), and
    rewards the even ones, so groups stay mixed and a run goes on."""
    if len(completion) % 2:
        raise RuntimeError("this verifier breaks on odd lengths")
    return Verdict(1.0, "even length")


def breaks_on_even_ids(completion: str, sample) -> Verdict:
    """A plug-in broken on samples whose id ends in an even digit (every completion of such a
    prompt fails, a flat group that dynamic sampling drops), `even_length` on the others."""
    if sample.id[-1:].isdigit() and int(sample.id[-1]) % 2 == 0:
        raise RuntimeError("this verifier breaks on even ids")
    return even_length(completion, sample)
