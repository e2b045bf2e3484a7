"""Named algorithm presets: each fills the fields a user left unset (null) in `algo:`.

Plain tables: `mmrlvr.checks.resolve` fills them into a config (nothing here reads one)."""

from __future__ import annotations


_BASE = dict(
    advantage="grpo", clip_low=0.2, clip_high=0.2, dual_clip=3.0, importance_level="token", aggregation="token-mean",
    norm_length=None, kl_coef=0.0, kl_kind="k3", entropy_coef=0.0, dynamic_sampling=False, max_rounds=1,
    overlong_buffer=0, overlong_factor=1.0, mask_truncated=False, ppo_epochs=1, mini_batches=1, grad_accum=1,
)

PRESETS: dict[str, dict] = {
    # GRPO (DeepSeekMath) as run today: token-mean, no KL (TRL's and verl's current default).
    "grpo": {},
    # Dr. GRPO: no std normalisation, constant-length token-sum aggregation.
    "dr_grpo": dict(advantage="dr_grpo", aggregation="seq-mean-token-sum-norm"),
    # DAPO: clip-higher, dynamic sampling, token-mean, soft overlong punishment, no KL; the paper
    # takes 16 optimizer steps per rollout batch (512 prompts x 16 answers, mini-batches of 512
    # answers), and clip-higher only acts once the policy has moved off the sampler.
    "dapo": dict(clip_high=0.28, dynamic_sampling=True, max_rounds=3, overlong_buffer=-1, overlong_factor=1.0,
                 mini_batches=16),
    # GSPO: sequence-level importance ratio with its much tighter clip range; 4 mini-batch updates
    # per rollout batch as in the paper (each batch split in 4), so the sequence ratio leaves 1.
    "gspo": dict(importance_level="sequence", clip_low=3e-4, clip_high=4e-4, aggregation="seq-mean-token-mean",
                 mini_batches=4),
    # RLOO: leave-one-out baseline.
    "rloo": dict(advantage="rloo"),
    # REINFORCE++ (group baseline variant): batch-whitened advantages plus a k2 KL to the reference.
    "reinforce_pp": dict(advantage="reinforce_pp", kl_coef=0.01, kl_kind="k2"),
}
