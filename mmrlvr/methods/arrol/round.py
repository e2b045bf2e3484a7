"""arrol in a sampling round: over-generate each group to a prefix, keep `rollout.group_size` rows per
prompt by the quality head's scores (or the fallback), finish the survivors, then teach the head
their outcomes and report what happened under `arrol/` (docs/explanation/arrol.md).

The keep-or-drop decision runs inside segmented generation (`HFRolloutEngine.rollout_segmented`):
a pruned row costs its prefix only, and the survivors continue from their kept KV cache and their
own random stream, so they are exactly the rows the unpruned over-generated rollout would have
finished. Every group keeps the same number of rows, so the round stays rectangular (B, G).
"""

from __future__ import annotations

import dataclasses

import torch

from mmrlvr.methods.arrol.pruning import all_equal_share, auroc, rows_per_prompt, select_rows, within_group_auroc
from mmrlvr.methods.arrol.head import QualityHead


@dataclasses.dataclass
class Pending:
    """What a round's generation leaves for `learn`: the K = B x G survivors in rollout order."""

    hidden: torch.Tensor  # (K, H) float32: each survivor's prefix hidden state
    scores: torch.Tensor  # (K,) the head's prediction at the prefix (before it learns this round)
    lengths: torch.Tensor  # (K,) survivors' completion lengths
    counts: object  # segmented generation's SegmentCounts
    trusted: bool  # whether the head chose (else the fallback)
    rows: torch.Tensor | None = None  # (K,) each survivor's row in the unpruned rollout (prompt * M + position)


class ArrolPruner:
    """The head and its settings (`sample_efficiency.arrol`), one per run; `state_dict` goes into the
    run state (checkpoints), `load_state_dict` resumes it."""

    def __init__(self, a, group_size: int, max_reward: float = 1.0):
        self.a, self.group_size, self.max_reward = a, group_size, max_reward
        self.head = QualityHead(a.head_lr, a.head_weight_decay, a.head_steps, a.auroc_window, a.min_labels, a.min_auroc)

    @property
    def rows_per_prompt(self) -> int:
        return rows_per_prompt(self.group_size, self.a.over_generation)

    def generate(self, engine, prompts, sampling, seed: int):
        """(RolloutOutput of the B x G survivors, Pending). M = `rows_per_prompt` rows per prompt are
        generated to `prefix_tokens`; the head scores each from its prefix hidden state."""
        m, g, trusted = self.rows_per_prompt, self.group_size, self.head.trusted()
        seen: dict[int, tuple[torch.Tensor, float]] = {}  # rollout row -> (hidden (H,), score)

        def keep(view) -> list[bool]:
            scores = self.head.score(view.hidden)
            rows = (view.prompt_index * m + view.group_position).tolist()
            seen.update({r: (h, s) for r, h, s in zip(rows, view.hidden.float().cpu(), scores.tolist())})
            return select_rows(scores, view.prompt_index, view.group_position, g, self.a.target_pos_share, trusted)

        seg = engine.rollout_segmented(prompts, m, sampling, seed, prefix_tokens=self.a.prefix_tokens, keep=keep)
        kept = seg.rows.tolist()
        if len(kept) != len(prompts) * g:
            raise RuntimeError(f"arrol kept {len(kept)} rows, expected {len(prompts)} x {g}")
        hidden = torch.stack([seen[r][0] for r in kept]) if kept else torch.zeros(0, 0)
        scores = torch.tensor([seen[r][1] for r in kept], dtype=torch.float32)
        lengths = torch.tensor([len(c.token_ids) for c in seg.output.completions], dtype=torch.long)
        return seg.output, Pending(hidden, scores, lengths, seg.counts, trusted, seg.rows)

    def learn(self, pending: Pending, rewards: torch.Tensor) -> dict:
        """Label the survivors from their (B, G) verifier rewards, record the head's out-of-sample
        scores, fit the head on them; the round's `arrol/` metrics."""
        labels = (rewards.reshape(-1).nan_to_num(0.0) / self.max_reward >= self.a.positive_at).long()
        step_auroc = auroc(pending.scores, labels)
        within = within_group_auroc(pending.scores.view(rewards.shape), labels.view(rewards.shape))
        self.head.observe(pending.scores, labels)
        loss = self.head.fit(pending.hidden, labels) if labels.numel() else float("nan")
        c, p = pending.counts, self.a.prefix_tokens
        # what a pruned row still generating at the prefix would have cost on: the survivors that were
        # still generating there, their mean continuation (an estimate; tokens_saved_max bounds it)
        cont = pending.lengths[pending.lengths > p] - p
        saved = c.pruned_alive * (cont.float().mean().item() if cont.numel() else 0.0)
        return {
            "arrol/head_auroc": step_auroc,
            "arrol/head_auroc_within": within,
            "arrol/head_auroc_window": self.head.window_auroc(),
            "arrol/head_trusted": float(pending.trusted),
            "arrol/head_loss": loss,
            "arrol/survivor_pos_share": labels.float().mean().item() if labels.numel() else float("nan"),
            "arrol/all_equal_groups": all_equal_share(rewards),
            "arrol/tokens_generated": float(c.tokens_generated),
            "arrol/tokens_saved": float(saved),
            "arrol/tokens_saved_max": float(c.tokens_saved_max),
            "arrol/pruned_frac": (c.rows - c.kept) / max(c.rows, 1),
        }

    def state_dict(self) -> dict:
        return {"head": self.head.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state.get("head") or {})


def make_pruner(cfg, state: dict | None = None) -> ArrolPruner | None:
    """The run's pruner when `sample_efficiency.arrol.enabled` (restored from the run state's
    `arrol` entry on resume), else None."""
    a = cfg.sample_efficiency.arrol
    if not a.enabled:
        return None
    from mmrlvr.config.efficiency import max_reward

    pruner = ArrolPruner(a, cfg.rollout.group_size, max_reward(cfg))
    if state:
        pruner.load_state_dict(state)
    return pruner
