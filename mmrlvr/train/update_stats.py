"""What one update reports: loss terms summed per optimizer step, per-token means weighted by
tokens, the passes and tokens its forwards ran; under several processes the global batch's."""

from __future__ import annotations

import math

from mmrlvr.train.distributed import all_sum_dict


class UpdateStats:
    """Loss terms summed per optimizer step, per-token means weighted by tokens."""

    def __init__(self):
        self.summed: dict = {}
        self.weighted: dict = {}
        self.tokens = self.updated = 0.0
        self.passes = 0  # backward passes (micro-batches), zero-weight ones included
        self.computed = self.valid = 0.0  # tokens the update's forwards computed / that were no padding

    def add_pass(self, computed: int, valid: int) -> None:
        self.passes += 1
        self.computed += computed
        self.valid += valid

    def add(self, stats: dict, ntok: float, rows: int) -> None:
        for k, v in stats.items():
            if k in ("policy", "kl"):
                self.summed[k] = self.summed.get(k, 0.0) + float(v)
            else:
                self.weighted[k] = self.weighted.get(k, 0.0) + float(v) * ntok
        self.tokens += ntok
        self.updated += rows

    def result(self, n: int, steps: int, epochs: int, world: int) -> dict:
        if world > 1:  # the global batch's statistics, the same on every rank
            totals = all_sum_dict({**{f"s/{k}": v for k, v in self.summed.items() if k != "grad_norm"},
                                   **{f"w/{k}": v for k, v in self.weighted.items()}, "tokens": self.tokens,
                                   "updated": float(self.updated), "n": float(n),
                                   "computed": self.computed, "valid": self.valid})
            self.summed.update({k[2:]: v for k, v in totals.items() if k.startswith("s/")})
            self.weighted = {k[2:]: v for k, v in totals.items() if k.startswith("w/")}
            self.tokens, self.updated, n = totals["tokens"], totals["updated"], totals["n"]
            self.computed, self.valid = totals["computed"], totals["valid"]
        means = {k: v / max(self.tokens, 1.0) for k, v in self.weighted.items()}
        out = {f"actor/{k}": v for k, v in means.items() if not k.startswith("rc_")}
        out["loss/policy"] = self.summed.get("policy", 0.0) / steps
        out["loss/kl"] = self.summed.get("kl", 0.0) / steps
        out["actor/grad_norm"] = self.summed.get("grad_norm", 0.0) / steps
        out["actor/updated_seqs_frac"] = self.updated / max(n * epochs, 1)
        out["train/micro_batches"] = float(self.passes)  # the same on every rank (padded passes)
        out["train/padding_waste"] = padding_waste(self.computed, self.valid)
        for k in ("kl_k1", "kl_k3", "weight_mean", "capped_frac"):
            if f"rc_{k}" in means:
                out[f"rollout_correction/{k}"] = means[f"rc_{k}"]
        for who in ("learner", "sampler"):
            if f"rc_nll_{who}" in means:
                out[f"rollout_correction/ppl_{who}"] = math.exp(means[f"rc_nll_{who}"])
        return out


def padding_waste(computed: float, valid: float) -> float:
    """Tokens the update's forwards computed / tokens that were no padding, finite on every step (a
    NaN or infinity would be left out of metrics.jsonl): 1.0 when no forward ran (every group of the
    step had zero advantage: nothing computed, nothing wasted); the computed count itself when only
    zero-weight passes ran (several processes with no rows to update: all of it waste)."""
    return computed / valid if valid else float(computed) if computed else 1.0
