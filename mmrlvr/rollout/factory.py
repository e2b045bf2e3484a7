"""Pick the rollout engine named by `rollout.engine`: the one place the loop learns which.

The engines are a registry of builders, `fn(cfg, policy, processor) -> engine`; validation reads
its names (`ENGINES`), so a new engine is one registered builder here plus its module."""

from __future__ import annotations

from mmrlvr.models.wrapping import base_model, unwrap
from mmrlvr.registry import Registry

ENGINE_BUILDERS: Registry = Registry("rollout engine")


@ENGINE_BUILDERS.register("hf")
def _hf(cfg, policy, processor):
    from mmrlvr.rollout.hf import HFRolloutEngine

    return HFRolloutEngine(policy, processor)


@ENGINE_BUILDERS.register("vllm")
def _vllm(cfg, policy, processor):
    """vLLM is imported only when chosen."""
    from mmrlvr.models.load import resolve_model_path
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    base = base_model(policy)
    engine = VLLMRolloutEngine(
        resolve_model_path(cfg.model.path), processor, base.config, dtype=cfg.model.dtype,
        gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization,
        max_model_len=cfg.rollout.vllm_max_model_len, sleep=cfg.rollout.vllm_sleep, seed=cfg.seed,
        enforce_eager=cfg.rollout.vllm_enforce_eager,
        max_num_batched_tokens=cfg.rollout.vllm_max_num_batched_tokens,
        generation_config=getattr(base, "generation_config", None),
    )
    engine.sync_weights(policy)  # warm-started or resumed weights differ from the directory's
    return engine


@ENGINE_BUILDERS.register("vllm_server")
def _vllm_server(cfg, policy, processor):
    """A client of `mmrlvr rollout-server` (a list of addresses: a pool of clients, one per server);
    vLLM is never imported beside training."""
    from mmrlvr.rollout.server import ServerRolloutEngine
    from mmrlvr.rollout.server_pool import ServerPool

    base = base_model(policy)
    kw = dict(timeout=cfg.rollout.server_timeout, dtype=cfg.model.dtype,
              generation_config=getattr(base, "generation_config", None),
              weight_sync=cfg.rollout.weight_sync, key=cfg.rollout.server_key)
    url = cfg.rollout.server_url
    if isinstance(url, str):
        engine = ServerRolloutEngine(url, processor, base.config, **kw)
    else:
        engine = ServerPool.connect(list(url), processor, base.config, **kw)
    engine.sync_weights(policy)  # the servers start from their directory's weights
    return engine


ENGINES = tuple(ENGINE_BUILDERS.in_order())  # what `rollout.engine` accepts


def make_engine(cfg, policy, processor):
    """An engine sampling from `policy`'s current weights."""
    kind = cfg.rollout.engine
    if kind not in ENGINE_BUILDERS:
        raise ValueError(f"rollout.engine {kind!r} unknown; known: {', '.join(ENGINES)}")
    refuse_partitioned_sync(kind, policy)
    return ENGINE_BUILDERS.get(kind)(cfg, policy, processor)


def refuse_partitioned_sync(kind: str, policy) -> None:
    """DeepSpeed ZeRO-3 partitions each parameter (`ds_id`, an empty placeholder outside its gather);
    the sync gathers them (one bucket at a time over a broadcast, `rollout.zero3`), but a LoRA adapter
    is merged into the base weights for the copy, and peft's merge writes into those placeholders.
    One line before the first sync; `hf` samples from the policy itself and needs no copy."""
    params = getattr(policy, "parameters", None)  # a registered builder may be handed something else
    if kind == "hf" or not callable(params) or not hasattr(unwrap(policy), "merge_adapter"):
        return
    if any(hasattr(p, "ds_id") for p in params()):
        from mmrlvr.config import ConfigError

        raise ConfigError(f"rollout.engine={kind} with DeepSpeed ZeRO-3 and a LoRA adapter: merging the adapter into "
                          "ZeRO-3's partitioned weights for the sync is not handled; use FSDP2 "
                          "(configs/accelerate/fsdp2.yaml), ZeRO-2, or rollout.engine=hf")
