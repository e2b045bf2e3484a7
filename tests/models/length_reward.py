"""A reward plugin for the family runs: the completion's character count / 100.

Untrained policies never answer right; lengths of random text differ within almost every group,
so every RL step has a non-zero advantage and must move the weights."""

from mmrlvr.types import Verdict


def char_length(completion: str, sample) -> Verdict:
    return Verdict(len(completion) / 100.0, f"{len(completion)} characters")
