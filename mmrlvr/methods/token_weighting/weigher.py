"""The step's token weighting: signals -> weights, labels, diagnostics and token_roles files.

Weights are computed once per rollout batch, before the update, over the rows that carry a
non-zero advantage (the only ones the policy gradient sees; DAPO's dynamic sampling keeps exactly
these). Batch statistics such as the entropy top-k threshold therefore do not depend on how the
update splits the batch into mini- and micro-batches, nor on which rows it skips.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mmrlvr.algos.token_weights import LABEL_NAMES, METHODS, PAD, label_stats, token_labels, token_weights
from mmrlvr.data.collate import select_rows
from mmrlvr.methods.kawhi.steps import segment_steps
from mmrlvr.methods.token_weighting.signals import compute_signals
from mmrlvr.train.learner import micro_rows, one_forward_update
from mmrlvr.train.forward_rows import split_rows
from mmrlvr.train.micro_batches import consecutive, row_lengths

DIAGNOSTIC_SIGNALS = ("entropy", "visual_dependency")
DEPENDENT = 1e-3  # visual dependency above which a token counts as image-dependent (|delta logp| > ~0.045)


@dataclass
class TokenWeighting:
    """One batch's token weights with what produced them; signals and labels cover `rows` only."""

    weights: torch.Tensor | None  # (N, T) advantage multipliers, or None: all 1 (nothing computed)
    rows: list[int] = field(default_factory=list)  # batch rows the signals were computed for
    signals: dict = field(default_factory=dict)  # name -> (len(rows), T)
    labels: torch.Tensor | None = None  # (len(rows), T) codes of token_weights.token_labels
    metrics: dict = field(default_factory=dict)
    pending: None = None  # nothing left for the update to compute (see `PendingWeighting.pending`)

    @property
    def result(self) -> "TokenWeighting":
        """The finished weighting (this one): the step reads `result` after the update either way."""
        return self


def signals_needed(method: str, diagnose: bool) -> set[str]:
    needs = set(METHODS.get(method).needs)
    return needs | set(DIAGNOSTIC_SIGNALS) if diagnose else needs


def similarity_source(tw) -> dict:
    """The hidden states PEPO's similarity reads: the released variant's (all of them, at each
    token) or the chosen layers at the state predicting each token (minmax)."""
    if tw.pepo_variant == "released":
        return {"similarity_layers": None, "similarity_at_token": True}
    return {"similarity_layers": tw.similarity_layers, "similarity_at_token": False}


TEXT_SIGNALS = frozenset({"step_ids"})
"""Signals read from the completions' text (the tokenizer), not from a forward of the policy."""


def step_ids(tokenizer, completion_ids: torch.Tensor, mask: torch.Tensor, split: str) -> torch.Tensor:
    """(N, T) reasoning-step index of each completion token (`kawhi.steps.segment_steps` over the tokens'
    decoded texts, each distinct id decoded once); 0 on padding."""
    texts: dict[int, str] = {}
    out = torch.zeros(completion_ids.shape, dtype=torch.long)
    for i in range(completion_ids.shape[0]):
        ids = completion_ids[i, : int(mask[i].sum())].tolist()
        for j in ids:
            if j not in texts:
                texts[j] = tokenizer.decode([j])
        out[i, : len(ids)] = torch.tensor(segment_steps([texts[j] for j in ids], split), dtype=torch.long)
    return out


SHAREABLE = frozenset({"entropy", "visual_dependency"})
"""Signals the update's own forward can serve: per-token log-probs and entropies (not hidden states)."""


def shares_forward(cfg, algo, needs: set[str]) -> bool:
    """Whether the signals can take the clean log-probs and entropies from the update's own forward:
    `token_weighting.share_forward`, one forward per update (`one_forward_update`: that forward
    runs at the parameters the signals must see, over every weighted row; never under a token
    budget, which may split it) and no hidden states."""
    return (bool(cfg.token_weighting.share_forward) and one_forward_update(algo, cfg.train.micro_batch_tokens)
            and needs <= SHAREABLE)


def weigh_tokens(model, batch, adv: torch.Tensor, cfg, algo, suppress, *, step: int, fill: dict | None,
                 diagnose: bool = False, share: bool = False, tokenizer=None) -> "TokenWeighting | PendingWeighting":
    """Signals the method needs (plus entropy and visual dependency when `diagnose`), the method's
    weights on the rows with a non-zero advantage (1 elsewhere), labels and per-step metrics.

    `share` (when `shares_forward` allows it): nothing runs now; the returned `PendingWeighting`
    is handed to `Learner.update`, which finishes it from its own forward's log-probs and
    entropies (one no-grad forward saved: the clean one) before the loss is reduced.
    `tokenizer`: decodes completions for the text signals (kawhi's step ids)."""
    tw = cfg.token_weighting
    needs = signals_needed(tw.method, diagnose)
    if not needs:
        return TokenWeighting(None)
    t0 = time.perf_counter()
    rows = adv.ne(0).any(dim=1).nonzero().flatten().tolist()
    if not rows:
        return TokenWeighting(None, metrics={"time/token_signals": time.perf_counter() - t0})
    if share:
        if not shares_forward(cfg, algo, needs):
            raise ValueError(f"token weighting {tw.method!r} (signals {sorted(needs)}) cannot share the update's "
                             "forward: it needs one forward per update and no hidden states")
        return PendingWeighting(model, batch, rows, needs, cfg, algo, suppress, step, fill)
    signals = _signals(model, batch, rows, needs - TEXT_SIGNALS, cfg, algo, suppress, step, fill)
    if "step_ids" in needs:
        if tokenizer is None:
            raise ValueError(f"token weighting {tw.method!r} splits completions into steps: it needs the tokenizer")
        signals["step_ids"] = step_ids(tokenizer, batch.completion_ids[rows], batch.completion_mask[rows], tw.kawhi_split)
    return _weighting(batch, rows, signals, cfg, step, t0)


class TokenWeigher:
    """The run's token weighting, owned by the learner (`Learner.weigh_and_update`).

    Per batch it decides where the signals come from: their own no-grad forwards now (a
    `TokenWeighting`), or the update's own forward when `shares_forward` allows it (a
    `PendingWeighting` the update finishes). Either way the update reads `.weights` and
    `.pending`, and the step reads `.result` afterwards: no one asks which kind it got.
    `fill`: what a blacked-out patch looks like after normalisation (`signals.black_fill`);
    `tokenizer`: decodes completions for the text signals (kawhi's step ids)."""

    def __init__(self, cfg, suppress_ids, *, fill: dict | None = None, tokenizer=None):
        self.cfg, self.suppress, self.fill, self.tokenizer = cfg, list(suppress_ids), fill, tokenizer

    def start(self, model, batch, adv: torch.Tensor, *, step: int,
              diagnose: bool = False) -> "TokenWeighting | PendingWeighting":
        """Weigh `batch` (advantages `adv` (N, 1)) for step `step`'s update of `model` (unwrapped)."""
        cfg = self.cfg
        diagnose = diagnose and bool(cfg.token_weighting.diagnostics)  # the step asks on logged steps, rank 0
        share = shares_forward(cfg, cfg.algo, signals_needed(cfg.token_weighting.method, diagnose))
        return weigh_tokens(model, batch, adv, cfg, cfg.algo, self.suppress, step=step, fill=self.fill,
                            diagnose=diagnose, share=share, tokenizer=self.tokenizer)


def signal_mask(batch, rows: list[int]) -> torch.Tensor:
    """(len(rows), T) the tokens signals and weights are for: the sampled ones, in an episode only the
    policy's own (`batch.policy_mask`; inserted messages are context the forward reads, never weighted)."""
    mask = batch.completion_mask[rows]
    policy = getattr(batch, "policy_mask", None)
    return mask if policy is None else mask * policy[rows].to(mask.dtype)


def _signals(model, batch, rows, needs, cfg, algo, suppress, step, fill, clean: dict | None = None) -> dict:
    """The signals of `rows`, one forward per learner micro-batch: `micro_rows` rows, or packed within
    `train.micro_batch_tokens` (the signals' forwards are joined ones: each row pays for its prompt).
    Each rank runs its own number of them (no collective: the policy here is the unwrapped one)."""
    tw = cfg.token_weighting
    inputs, mask = select_rows(batch.prompt_inputs, rows), batch.completion_mask[rows]
    chunks = split_rows(range(len(rows)), cfg.train.micro_batch_tokens, lambda: row_lengths(inputs, mask, shared=False),
                        lambda r: consecutive(len(r), micro_rows(len(rows), algo)))
    return compute_signals(
        model, inputs, batch.completion_ids[rows], mask,
        sorted(needs), valid=signal_mask(batch, rows), temperature=cfg.rollout.temperature, suppress_ids=suppress, corrupt_prob=tw.corrupt_prob,
        seed=cfg.seed * 1_000_003 + step, fill=fill, **similarity_source(tw),
        clean=clean, chunks=chunks,
        kawhi_layers=tw.kawhi_layers, kawhi_heads=tw.kawhi_heads, kawhi_region_frac=tw.kawhi_region_frac,
        padding_free=cfg.train.padding_free,
    )


def _weighting(batch, rows: list[int], signals: dict, cfg, step: int, t0: float) -> TokenWeighting:
    """Signals of `rows` -> the batch's (N, T) weights, labels and metrics."""
    tw = cfg.token_weighting
    mask = signal_mask(batch, rows)
    settings = METHODS.get(tw.method).settings(tw)  # the method's own record, field by field from the config
    w_rows = token_weights(tw.method, signals, mask, settings=settings, progress=step / max(cfg.train.steps, 1))
    weights = signal_mask(batch, list(range(len(batch.completion_mask)))).float()
    weights[rows] = w_rows
    out = TokenWeighting(weights, rows, signals)
    valid = mask.bool()
    out.metrics["tokens/weight_mean"] = float(w_rows[valid].mean())
    if "step_ids" in signals:  # kawhi: how finely responses split and how far credit moved
        steps = torch.where(valid, signals["step_ids"], torch.zeros_like(signals["step_ids"]))
        out.metrics["tokens/steps_per_response"] = float((steps.max(1).values + 1).float().mean())
        out.metrics["tokens/weight_sd"] = float(w_rows[valid].std()) if int(valid.sum()) > 1 else 0.0
    if "region_attention" in signals:
        out.metrics["tokens/region_attention"] = float(signals["region_attention"][valid].mean())
    if "visual_dependency" in signals:
        out.metrics["tokens/visual_dependency"] = float(signals["visual_dependency"][valid].mean())
        out.metrics["tokens/dependent_frac"] = float((signals["visual_dependency"][valid] > DEPENDENT).float().mean())
    if "entropy" in signals and "visual_dependency" in signals:
        out.labels = token_labels(signals["entropy"], signals["visual_dependency"], mask,
                                  tw.perception_frac, tw.reasoning_frac)
        out.metrics.update(label_stats(out.labels, w_rows))
    out.metrics["time/token_signals"] = time.perf_counter() - t0
    return out


class PendingWeighting:
    """Token weights still to be computed, by `Learner.update` from its own forward.

    `rows`: the batch rows to weigh (non-zero advantage), all inside the update's one forward.
    `finish(logprobs, entropy)` takes their (len(rows), T) clean log-probs and entropies
    (detached), runs the corrupted forward if the method needs visual dependency, and returns the
    batch's (N, T) weights; the whole `TokenWeighting` is then `result`. The numbers are those
    of `weigh_tokens` without sharing: the same rows, seed, temperature and chunks. One
    difference, in metrics only: a row whose weights are all 0 (vppo_beta_min 0, tor_other 0)
    is known to be 0 only after the forward, so it stays in it and counts in
    `actor/updated_seqs_frac` and `actor/entropy` (it adds 0 to the loss either way)."""

    weights = None  # nothing to multiply up front: `Learner.update(batch, adv, tw.weights, pending=tw.pending)`

    def __init__(self, model, batch, rows, needs, cfg, algo, suppress, step, fill):
        self.model, self.batch, self.rows, self.needs = model, batch, rows, needs
        self.cfg, self.algo, self.suppress, self.step, self.fill = cfg, algo, suppress, step, fill
        self.result: TokenWeighting | None = None

    @property
    def pending(self) -> "PendingWeighting | None":
        """What the update finishes from its forward: this, until `finish` has run."""
        return self if self.result is None else None

    def finish(self, logprobs: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        clean = {"logprobs": logprobs.detach(), "entropy": entropy.detach()}
        signals = _signals(self.model, self.batch, self.rows, self.needs, self.cfg, self.algo, self.suppress,
                           self.step, self.fill, clean=clean)
        self.result = _weighting(self.batch, self.rows, signals, self.cfg, self.step, t0)
        return self.result.weights


def write_token_roles(run_dir: Path, step: int, batch, adv: torch.Tensor, tw: TokenWeighting, tokenizer,
                      method: str, k: int = 4) -> Path | None:
    """`token_roles/step_<step>.jsonl`: for up to k completions, each token with its signals,
    label and weight (padding excluded), in the format the notebooks read."""
    if not tw.rows or k <= 0:
        return None
    where = batch.row_groups()  # (prompt, place in group) per row: groups may differ in size
    path = Path(run_dir) / "token_roles" / f"step_{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for j, row in enumerate(tw.rows[:k]):
            n = int(batch.completion_mask[row].sum())
            ids = batch.completion_ids[row, :n].tolist()
            labels = tw.labels[j, :n].tolist() if tw.labels is not None else [PAD] * n
            b, place = where[row]
            rec = {
                "step": step,
                "sample_id": batch.samples[b].id,
                "row": row,
                "reward": float(batch.rewards[b, place]),
                "advantage": float(adv[row].flatten()[0]),
                "tokens": [tokenizer.decode([i]) for i in ids],
                "token_ids": ids,
                "signals": {name: [round(float(x), 6) for x in sig[j, :n]] for name, sig in sorted(tw.signals.items())},
                "labels": [LABEL_NAMES.get(code, "other") for code in labels],
                "weights": [round(float(x), 6) for x in tw.weights[row, :n]],
                "method": method,
            }
            f.write(json.dumps(rec) + "\n")
    return path
