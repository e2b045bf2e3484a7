"""One record per model family (`mmrlvr.models.family_spec`): every per-family table reads it.

A record registered here shows up in every table (tiny builds, adapters, vLLM weight names and
episodes, box conventions, the memory patches' classes), and no module outside the record (and the
families' own tiny builders) names a family's model type: a second table would be a second list
that could disagree with the first.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from mmrlvr.models import adapters, families
from mmrlvr.models.family_spec import (
    FAMILY_SPECS, SIGLIP_PACKED, Adapter, FamilySpec, VllmNames, family_spec, register_family,
)
from mmrlvr.models.patches import attention_mask, gated_mlp, rms_norm
from mmrlvr.rollout import weight_names
from mmrlvr.verifiers import grounding

ROOT = Path(__file__).resolve().parents[2]


def build_toy(seed: int = 0):
    return ("model", seed)


TOY = FamilySpec(
    "toy_vl", Adapter("toy_vl", ("<toy_image>",), "per_image", {"image": ("pixel_values",)}, token_keys=(),
                      vision_module="toy_tower", turn_end="<toy_end>"),
    box_format="norm1", tiny_builder=f"{__name__}:build_toy",
    vllm=VllmNames((("model.text.", "language_model.model."), ("model.toy_tower.", "toy_tower.")),
                   vision_packed=SIGLIP_PACKED, siglip_tower="model.toy_tower.", episodes=True),
    text_attentions=("ToyAttention",), gated_mlps=("ToyMLP",), rms_norms=("ToyRMSNorm",), aliases=("toy_vl_small",))


@pytest.fixture
def toy():
    register_family(TOY)
    try:
        yield TOY
    finally:
        del FAMILY_SPECS[TOY.model_type]


def test_a_registered_family_shows_up_in_every_table(toy):
    # tiny builds
    assert "toy_vl" in families.FAMILIES and families.tiny_model_type("tiny:toy_vl") == "toy_vl"
    assert families._builders()["toy_vl"] is build_toy
    # adapters: the family, its *_text / *_moe variants and its alias
    assert adapters.ADAPTERS["toy_vl"] is toy.adapter
    assert adapters.adapter_for("toy_vl") is toy.adapter and adapters.adapter_for("toy_vl_text") is toy.adapter
    alias = adapters.adapter_for("toy_vl_small")
    assert alias.model_type == "toy_vl_small" and dataclasses.replace(alias, model_type="toy_vl") == toy.adapter
    assert adapters.ADAPTERS["toy_vl_small"] == alias
    # vLLM weight names and episodes
    assert "toy_vl" in weight_names.FAMILIES
    assert weight_names.vllm_param_name("model.text.layers.0.self_attn.k_proj.weight", "toy_vl") == (
        "language_model.model.layers.0.self_attn.qkv_proj.weight", "k")
    assert weight_names.vllm_param_name("model.toy_tower.layers.0.self_attn.q_proj.weight", "toy_vl") == (
        "toy_tower.layers.0.self_attn.qkv_proj.weight", "q")
    assert weight_names.vllm_checkpoint_name("model.toy_tower.embeddings.weight", "toy_vl") == (
        "model.toy_tower.vision_model.embeddings.weight")
    assert weight_names.vllm_episodes("toy_vl")
    # box conventions, the verifier's and the grounding task's
    assert grounding.family_box_format("toy_vl") == "norm1" and grounding.FAMILY_BOX_FORMATS["toy_vl_small"] == "norm1"
    from mmrlvr.tasks import grounding as task

    assert task.CONVENTIONS["toy_vl"] == "norm1" and task.box_format_for("auto", "toy_vl") == "norm1"
    # the memory patches' classes
    assert "ToyAttention" in attention_mask.TEXT_ATTENTIONS and "ToyMLP" in gated_mlp.GATED_MLPS
    assert "ToyRMSNorm" in rms_norm.RMS_NORMS
    ToyMLP = type("ToyMLP", (__import__("torch").nn.Module,), {})
    assert gated_mlp.why_not_recomputed(ToyMLP()) != "not a gated MLP of a known family"


def test_the_record_leaves_with_its_registration(toy):
    del FAMILY_SPECS["toy_vl"]
    try:
        assert "toy_vl" not in families.FAMILIES and "toy_vl" not in weight_names.FAMILIES
        assert adapters.adapter_for("toy_vl").model_type == "qwen2_5_vl"  # an unknown type: the default's
        assert grounding.family_box_format("toy_vl") == "absolute"
        with pytest.raises(ValueError, match="no vLLM weight mapping"):
            weight_names.vllm_param_name("model.text.x", "toy_vl")
        with pytest.raises(ValueError, match="no tiny builder"):
            families.tiny_model_type("tiny:toy_vl")
    finally:
        FAMILY_SPECS["toy_vl"] = TOY


def test_a_model_type_has_one_record(toy):
    with pytest.raises(ValueError, match="already has a family record"):
        register_family(TOY)
    with pytest.raises(ValueError, match="already has a family record"):
        register_family(dataclasses.replace(TOY, model_type="other", adapter=dataclasses.replace(TOY.adapter, model_type="other")))
    with pytest.raises(ValueError, match="adapter"):
        FamilySpec("x", TOY.adapter, box_format="norm1")
    with pytest.raises(ValueError, match="box_format"):
        dataclasses.replace(TOY, box_format="pixels")
    with pytest.raises(KeyError, match="known: qwen2_5_vl"):
        family_spec("nope")


def test_the_two_family_lists_are_the_registry():
    """What `tiny:<model_type>` builds and what vLLM sync maps are the same families: the records'."""
    assert families.FAMILIES == weight_names.FAMILIES == tuple(FAMILY_SPECS)
    assert set(adapters.ADAPTERS) == {t for s in FAMILY_SPECS.values() for t in (s.model_type, *s.aliases)}


def family_literals(folder: Path) -> list[str]:
    """Where a module of mmrlvr/ or tasks/ writes a registered family's model type as a string: only
    its record (family_spec.py) and its own tiny builder (families/<family>.py) may."""
    names = {t for s in FAMILY_SPECS.values() for t in (s.model_type, *s.aliases)}
    out = []
    for sub in ("mmrlvr", "tasks"):
        for path in sorted((folder / sub).rglob("*.py")):
            rel = path.relative_to(folder).as_posix()
            if rel == "mmrlvr/models/family_spec.py" or rel.startswith("mmrlvr/models/families/") and path.stem in names:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.Constant) and node.value in names:
                    out.append(f"{rel}:{node.lineno}: {node.value!r}")
    return out


def test_no_table_outside_the_records_names_a_family():
    assert family_literals(ROOT) == []
