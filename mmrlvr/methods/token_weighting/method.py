"""token_weighting's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

import dataclasses

from mmrlvr.config import ConfigError
from mmrlvr.methods.token_weighting import checks
from mmrlvr.methods.hooks import Method, register
from mmrlvr.methods.token_weighting.signals import black_fill
from mmrlvr.methods.token_weighting.weigher import TokenWeigher, write_token_roles
from mmrlvr.train.setup import sharded_launch


def for_launch(cfg, accelerator):
    """Under a sharded launch: a weighting is refused, diagnostics off.

    The signal forwards run on each rank's own rows with a non-zero advantage (rank 0 alone for
    diagnostics), so their number differs between ranks; with sharded parameters each forward is
    a collective and the ranks would wait for each other forever."""
    if not sharded_launch(accelerator):
        return cfg
    if cfg.token_weighting.method != "none":
        raise ConfigError(f"token_weighting.method={cfg.token_weighting.method} is not supported with sharded "
                          "parameters (FSDP / DeepSpeed ZeRO-3) yet; use DDP or token_weighting.method=none")
    return dataclasses.replace(cfg, token_weighting=dataclasses.replace(cfg.token_weighting, diagnostics=False))


def make_weigher(cfg, engine, processor) -> TokenWeigher:
    """Per-token weights from no-grad forwards of the unwrapped policy (through the DDP wrapper each
    forward would also broadcast buffers, a collective that hangs when only rank 0 runs diagnostics)."""
    return TokenWeigher(cfg, engine.suppress_ids, fill=black_fill(processor), tokenizer=processor.tokenizer)


def record(run_dir, step: int, batch, advantages, weighting, tokenizer, cfg) -> None:
    if weighting is not None:
        write_token_roles(run_dir, step, batch, advantages, weighting, tokenizer, cfg.token_weighting.method,
                          cfg.token_weighting.roles_per_step)


METHOD = register(Method("token_weighting", "explanation/token-weighting.md",
                         rules=checks.RULES, check=checks.check,
                         on=lambda cfg: cfg.token_weighting.method != "none" or bool(cfg.token_weighting.diagnostics),
                         launch=for_launch, weights=make_weigher, record=record))
