"""The forward's memory options as one record, read once from `train.*` and handed down whole.

`completion_logprobs` enters the patches these name for the length of one forward; the learner, the
supervised warm start and `mmrlvr plan` read the same record, so an option added here reaches all of
them without a new parameter in each file on the way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ForwardOptions:
    """What the training forward does to save memory; none of them changes the numbers (each
    patch steps aside where it could not match the plain forward)."""

    prompt_once: bool = False  # each distinct prompt's forward once (`train.prompt_once`)
    chunked_head: bool = False  # the output layer in blocks, no (N, T, V) logits (`train.chunked_head`)
    recompute_mlp: bool = False  # gated MLPs keep 2 of their 4 (n, T, I) tensors (`train.recompute_mlp`)
    mask_once: bool = False  # one additive attention mask shared by every layer (`train.mask_once`)
    recompute_norm: bool = False  # bf16 / fp16 RMSNorms keep only their input (`train.recompute_norm`)
    padding_free: bool = False  # a micro-batch's rows as one packed sequence of real tokens (`train.padding_free`)

    @classmethod
    def of(cls, train) -> "ForwardOptions":
        """From a `TrainConfig` (`cfg.train`)."""
        return cls(bool(train.prompt_once), bool(train.chunked_head), bool(train.recompute_mlp),
                   bool(train.mask_once), bool(train.recompute_norm), bool(train.padding_free))


PLAIN = ForwardOptions()
"""The unpatched forward, every prompt with each of its rows."""
