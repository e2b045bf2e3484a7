"""Every look through a training wrapper goes through `mmrlvr.models.wrapping` (one place to
teach a new wrapper), and the family lookup sees through DDP-style and peft wrappers."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
WRAPPING = ROOT / "mmrlvr" / "models" / "wrapping.py"
WRAPPER_ATTRS = ("module", "get_base_model")  # DDP / DeepSpeed, peft


def ad_hoc_unwraps(tree: ast.AST) -> list[int]:
    """Lines that read a wrapper attribute: `x.module`, `x.get_base_model`, or getattr/hasattr of them."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in WRAPPER_ATTRS:
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in WRAPPER_ATTRS):
            lines.append(node.lineno)
    return lines


def test_no_unwrap_outside_wrapping_module():
    found = []
    for folder in (ROOT / "mmrlvr", ROOT / "tasks"):
        for path in sorted(folder.rglob("*.py")):
            if path != WRAPPING:
                found += [f"{path.relative_to(ROOT)}:{n}" for n in ad_hoc_unwraps(ast.parse(path.read_text()))]
    assert not found, "unwrap through mmrlvr.models.wrapping (unwrap / base_model), not ad hoc:\n" + "\n".join(found)


def test_the_scan_sees_each_form():
    src = ("a = getattr(m, 'module', m)\nb = m.get_base_model()\nc = hasattr(m, 'get_base_model')\n"
           "d = m.module\ne = getattr(m, 'model', m)\n")  # the last is a family's inner model, not a wrapper
    assert sorted(ad_hoc_unwraps(ast.parse(src))) == [1, 2, 3, 4]


class _Holder(torch.nn.Module):
    """The attribute layout of DDP and a DeepSpeed engine (the model under `.module`), without a process group."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module


def test_model_adapter_sees_through_ddp_and_peft(family_policy):
    """A tiny Gemma 3 under LoRA under a DDP-style holder still gets Gemma 3's adapter (an unknown
    model falls back to Qwen2.5-VL's, so a lookup that stopped at a wrapper would say qwen2_5_vl)."""
    from mmrlvr.models.adapters import model_adapter
    from mmrlvr.models.wrapping import base_model, unwrap

    model, _ = family_policy("gemma3", lora_rank=4)
    assert type(model).__name__.startswith("Peft")
    held = _Holder(model)
    assert unwrap(held) is model and unwrap(model) is model
    assert type(base_model(held)).__name__ == "Gemma3ForConditionalGeneration"
    assert model_adapter(held).model_type == "gemma3"
    assert model_adapter(model).model_type == "gemma3"
