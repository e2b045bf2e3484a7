"""`mmrlvr plan CONFIG [overrides...] [--json] [--gpus N] [--gpu-memory GB]`: load, size, plan, print."""

from __future__ import annotations

import json


def plan_config(path: str, overrides: list[str] | None = None, *, gpus: int | None = None,
                gpu_gb: float | None = None, launcher: str | None = None, prompt_text: int = 256,
                server_tp: int = 1, server_dp: int = 1) -> tuple[dict, list[str]]:
    """(the plan's result, notes) for a config file: validated first, so a bad key is one line."""
    from mmrlvr.config import ConfigError, load_config
    from mmrlvr.plan.hardware import resolve_hardware
    from mmrlvr.plan.memory import plan, suggestions
    from mmrlvr.plan.shape import model_shape
    from mmrlvr.checks.validate import config_errors

    cfg = load_config(path, overrides)
    # everything but an installed vLLM, or a rollout server that answers: a run can be planned
    # on a machine without either
    errors = [e for e in config_errors(cfg)
              if "expected an installed vLLM" not in e and not e.startswith("rollout.server_url=")]
    if errors:
        raise ConfigError("\n".join(errors))
    if prompt_text < 0:
        raise ConfigError(f"--prompt-text-tokens {prompt_text}: expected an integer >= 0")
    try:
        hw = resolve_hardware(path, gpus, gpu_gb, launcher)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    shape = model_shape(cfg.model.path)
    result = plan(cfg, shape, hw, prompt_text)
    result["suggestions"] = [] if result["fits"] else suggestions(cfg, shape, hw, result, prompt_text)
    notes = []
    if cfg.rollout.engine == "vllm_server":
        from mmrlvr.plan.memory import geometry
        from mmrlvr.plan.server import server_plan

        if server_tp < 1 or server_dp < 1:
            raise ConfigError(f"--server-tensor-parallel-size {server_tp} / --server-data-parallel-size {server_dp}: "
                              "expected whole numbers of GPUs, at least 1")
        geo = geometry(cfg, shape, prompt_text)
        result["server"] = server_plan(shape, cfg.model.dtype, hw.gpu_gb, server_tp, server_dp,
                                       geo.prompt + geo.completion, geo.rollout_rows)
        notes.append("rollout.engine=vllm_server: the rollout's weights and KV cache are on the server's GPUs "
                     "(its lines below), not the trainer's")
    from mmrlvr.plan.memory import task_media

    if cfg.model.max_pixels is None and "image" in task_media(cfg.task.name, cfg.task.args):
        notes.append(f"model.max_pixels is null: planned at the processor's own bound ({result['visual_tokens']} "
                     "visual tokens an image)")
    if cfg.rollout.engine == "vllm" and cfg.rollout.vllm_sleep is not False:
        notes.append("vLLM sleeps during the update: its share counts in rollout and evaluation only")
    if cfg.device == "cpu":
        notes.append("device: cpu - the figures are per process, in host memory")
    return result, notes


DOES_NOT_FIT = 3  # `mmrlvr plan`'s exit status when the config does not fit (2: the config itself is refused)


def run_plan(path: str, overrides: list[str] | None = None, *, as_json: bool = False, **kw) -> str:
    """The plan as text (or JSON)."""
    return plan_report(path, overrides, as_json=as_json, **kw)[0]


def plan_report(path: str, overrides: list[str] | None = None, *, as_json: bool = False,
                **kw) -> tuple[str, bool]:
    """(the plan as text or JSON, whether it fits): the command prints the one and exits on the other."""
    from mmrlvr.plan.memory import format_plan

    result, notes = plan_config(path, overrides, **kw)
    fits = bool(result["fits"]) and result.get("server", {}).get("fits", True)
    if as_json:
        return json.dumps({**result, "notes": notes}, indent=1), fits
    text = format_plan(result, notes)
    if "server" in result:
        from mmrlvr.plan.server import format_server

        text += "\n\n" + format_server(result["server"])
    return text, fits
