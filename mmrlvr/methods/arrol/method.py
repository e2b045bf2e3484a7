"""arrol's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

from mmrlvr.methods.arrol.round import ArrolPruner, make_pruner
from mmrlvr.methods.arrol import checks
from mmrlvr.methods.hooks import Method, register


def generate(pruner: ArrolPruner, engine, prompts, sampling, seed: int):
    """(the B x G survivors' RolloutOutput, what `learn` needs)."""
    return pruner.generate(engine, prompts, sampling, seed=seed)


def learn(pruner: ArrolPruner, pending, rewards) -> dict:
    """The head learns the survivors' outcomes (verifier rewards (B, G), before any bonus)."""
    return pruner.learn(pending, rewards)


def eval_rank(cfg, checkpoint: str, samples: int):
    """The head's choice among k samples per prompt, when asked for and k > 1; else None."""
    a = cfg.sample_efficiency.arrol
    if a.eval_weighting != "head" or samples <= 1:
        return None
    from mmrlvr.methods.arrol.eval import head_at_k, load_head

    head = load_head(checkpoint)  # from the checkpoint's run state: a missing head fails before the model loads

    def rank(engine, kept, sampling, seed: int, max_new_tokens, terms, scorer) -> dict:
        return head_at_k(engine, head, kept, sampling, samples, a.prefix_tokens, seed, max_new_tokens, terms, scorer)

    return rank


METHOD = register(Method("arrol", "explanation/arrol.md", check=checks.check_arrol,
                         on=lambda cfg: bool(cfg.sample_efficiency.arrol.enabled),
                         state=make_pruner, generate=generate, learn=learn, eval_rank=eval_rank,
                         experimental=True))
