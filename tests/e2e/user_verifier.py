"""A user verifier in a plain file, named in a config as `path/to/user_verifier.py:even_length`.

It rewards completions with an even number of characters: an untrained policy gets mixed groups
from it, so a few RL steps have signal.
"""

from mmrlvr.types import Verdict


def even_length(completion: str, sample) -> Verdict:
    even = len(completion) % 2 == 0
    return Verdict(float(even), "even length" if even else "odd length", {"length": float(len(completion))})
