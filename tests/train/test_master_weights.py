"""A bf16 run trains over float32 master weights (`mmrlvr.train.precision`).

At the GPU configs' learning rate (1e-6) AdamW's step is below bf16's resolution for almost every
weight (bf16's spacing near 0.02 is 1.2e-4), so a bf16 model updated in place barely moves: before
the masters, the quickstart run below moved 0.24% of the 2-D weights' entries between two
checkpoints (mean |dw| 2.5e-9) against 98% (6.3e-7) in float32. With the masters every trainable
tensor moves by about what the float32 run moves it; the checkpoint holds them as float32, so a
resumed bf16 run continues exactly; `model/` holds the final policy in bf16.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmrlvr.config import ConfigError, load_config
from mmrlvr.recipe.loop import train

ROOT = Path(__file__).resolve().parents[2]
RUN = [
    "task.train_size=32", "task.eval_size=8", "warm_start.steps=4", "warm_start.batch_size=8",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8",
    "train.log_every=1", "train.lr=1.0e-6", "eval.batch_size=8", "verifier_workers=0",
    "algo.algorithm=reinforce_pp",  # a KL reference: after a resume it must be the same bf16 policy again
    f"rewards=[{{verifier: {ROOT / 'tests/e2e/user_verifier.py'}:even_length}}]",  # mixed groups: the policy moves
]


def _run(out: Path, dtype: str, steps: int) -> Path:
    train(load_config(ROOT / "configs/quickstart.yaml", [*RUN, f"model.dtype={dtype}", f"train.steps={steps}",
                                                         "train.save_every=1", f"output_dir={out}"]))
    return out


def _steps(run: Path) -> dict:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith("time/") and k != "rollout/tokens_per_s"}
            for r in rows if "reward/mean" in r}


def _weights(run: Path, step: int) -> dict:
    return load_file(run / "checkpoints" / f"step_{step}" / "model.safetensors")


def _moved(run: Path) -> dict[str, tuple[float, float]]:
    """Per tensor between the last two checkpoints (one RL update): (mean |dw|, fraction of entries moved)."""
    a, b = _weights(run, 2), _weights(run, 3)
    return {k: ((b[k].double() - a[k].double()).abs().mean().item(), (b[k] != a[k]).double().mean().item()) for k in a}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("masters")
    return {d: _run(root / d, d, 3) for d in ("bfloat16", "float32")}


def test_bf16_moves_every_trainable_tensor_as_float32_does(runs):
    bf16, fp32 = _moved(runs["bfloat16"]), _moved(runs["float32"])
    assert sorted(bf16) == sorted(fp32)
    trained = [k for k in fp32 if fp32[k][0] > 0]
    assert len(trained) > 0.9 * len(fp32), "the float32 update reached too few tensors to compare"
    # AdamW's first steps move each entry by about lr whatever the gradient's scale: the bf16 run's
    # gradients differ by bf16 rounding, not its step sizes
    off = {k: (bf16[k][0] / fp32[k][0], bf16[k][1], fp32[k][1]) for k in trained
           if not (0.5 < bf16[k][0] / fp32[k][0] < 2.0 and bf16[k][1] > 0.8 * fp32[k][1])}
    assert not off, f"tensors a bf16 update moves unlike float32 (|dw| ratio, moved frac bf16, float32): {off}"
    mean = sum(bf16[k][0] for k in trained) / len(trained)
    assert 2e-7 < mean < 5e-6  # about lr (1e-6) per AdamW step; bf16 in place: ~2e-9
    weights = _weights(runs["bfloat16"], 3)
    assert {str(w.dtype) for w in weights.values()} == {"torch.float32"}  # the masters (nothing frozen here)


def test_final_model_is_in_the_models_dtype(runs):
    from mmrlvr.models.load import load_checkpoint

    served = load_file(runs["bfloat16"] / "model" / "model.safetensors")
    masters = _weights(runs["bfloat16"], 3)
    assert sorted(served) == sorted(masters)
    assert all(v.dtype == torch.bfloat16 for v in served.values())
    assert all(torch.equal(served[k], masters[k].to(torch.bfloat16)) for k in served)  # the masters, rounded
    assert all(v.dtype == torch.float32 for v in load_file(runs["float32"] / "model" / "model.safetensors").values())
    model, _ = load_checkpoint(str(runs["bfloat16"] / "model"))  # a plain from_pretrained directory
    assert model.config.model_type == "qwen2_5_vl"


def test_bf16_resume_is_exact(runs, tmp_path):
    """Stopped after step 2 and resumed: step 3's metrics and float32 masters equal the straight run's
    bit for bit (the masters, AdamW's float32 moments, the bf16 reference reloaded alike)."""
    resumed = _run(tmp_path / "resumed", "bfloat16", 2)
    train(load_config(ROOT / "configs/quickstart.yaml", [*RUN, "model.dtype=bfloat16", "train.steps=3",
                                                         "train.save_every=1", f"output_dir={resumed}"]))
    straight = runs["bfloat16"]
    a, b = _steps(straight), _steps(resumed)
    assert sorted(b) == [1, 2, 3] and a[3]["loss/kl"] != 0.0
    assert a[3] == b[3]
    wa, wb = _weights(straight, 3), _weights(resumed, 3)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], _weights(straight, 2)[k]) for k in wa)  # step 3 did move the masters


def test_bf16_lora_resume_is_exact(tmp_path):
    """LoRA in bf16: the base loads in bf16 (frozen), the adapter's masters are float32 in the
    checkpoint and a resumed run's step 3 equals the straight run's; `model/` is merged, in bf16."""
    lora = ["model.lora_rank=4", "train.lr=1.0e-4"]  # reinforce_pp's KL: the base with the adapter off

    def run(out: Path, steps: int) -> Path:
        train(load_config(ROOT / "configs/quickstart.yaml", [*RUN, *lora, "model.dtype=bfloat16", f"train.steps={steps}",
                                                             "train.save_every=1", f"output_dir={out}"]))
        return out

    from mmrlvr.models.load import resolve_model_path

    # built before either run: building the tiny model on first use draws from torch's RNG after
    # the seed is set, and the adapter's random initialisation would differ between the runs
    resolve_model_path("tiny")
    straight = run(tmp_path / "straight", 3)
    resumed = run(run(tmp_path / "resumed", 2), 3)
    adapter = lambda r, s: load_file(r / "checkpoints" / f"step_{s}" / "adapter_model.safetensors")  # noqa: E731
    wa, wb = adapter(straight, 3), adapter(resumed, 3)
    assert {v.dtype for v in wa.values()} == {torch.float32}
    assert [k for k in wa if not torch.equal(wa[k], wb[k])] == []
    assert not all(torch.equal(wa[k], adapter(straight, 2)[k]) for k in wa)
    assert _steps(straight)[3] == _steps(resumed)[3]
    served = load_file(straight / "model" / "model.safetensors")
    assert not any("lora" in k for k in served) and {v.dtype for v in served.values()} == {torch.bfloat16}


def test_float16_training_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        train(load_config(ROOT / "configs/quickstart.yaml", ["model.dtype=float16", f"output_dir={tmp_path}"]))
    assert "\n" not in str(err.value) and "model.dtype='float16'" in str(err.value) and "loss scaling" in str(err.value)
    assert not (tmp_path / "config.yaml").exists()  # refused before the run directory was touched


def test_master_weights_step_in_float32_and_the_model_computes_in_bf16(tiny_dir):
    """Hand-computed: one SGD step of lr 1e-6 on a gradient of ones moves every float32 master by
    1e-6 (to float32 rounding) while hardly any bf16 weight could move by itself; the model's
    weights are the masters rounded, which is what the HF engine samples from."""
    from mmrlvr.config import ModelConfig
    from mmrlvr.models.load import load_policy
    from mmrlvr.train.precision import MasterWeights

    model, _ = load_policy(ModelConfig(path=str(tiny_dir), dtype="bfloat16", freeze_vision=True), master_weights=True)
    kinds = {(p.requires_grad, p.dtype) for p in model.parameters()}
    assert kinds == {(True, torch.float32), (False, torch.bfloat16)}  # masters to train, a frozen bf16 tower
    loaded = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    masters = MasterWeights(model, torch.bfloat16)
    assert len(masters) == len(loaded) and {p.dtype for p in model.parameters()} == {torch.bfloat16}
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.ones_like(p)  # bf16, as a backward leaves it
    masters.take_grads()
    assert all(p.grad is None for p in model.parameters())
    assert all(m.grad.dtype == torch.float32 for m in masters.params())
    torch.optim.SGD(masters.params(), lr=1e-6).step()
    masters.put_weights()
    for name, p, m in masters.pairs:
        torch.testing.assert_close(m, loaded[name] - 1e-6, rtol=0, atol=1e-8)  # every entry moved by lr
        assert torch.equal(p.detach(), m.to(torch.bfloat16))
    bf16_moved = sum(int((p.detach() != loaded[n].to(torch.bfloat16)).sum()) for n, p, _ in masters.pairs)
    assert bf16_moved < 0.05 * sum(p.numel() for _, p, _ in masters.pairs)  # below bf16's resolution mostly
    state = masters.state_dict(model)
    assert all(state[n].dtype == torch.float32 for n in loaded)
    assert all(v.dtype == torch.bfloat16 for k, v in state.items() if k not in loaded and v.is_floating_point())
    stepped = {n: m.clone() for n, _, m in masters.pairs}
    masters.release()  # the warm start hands the model on like this: float32 parameters, the masters
    assert all(torch.equal(p.detach(), stepped[n]) for n, p in model.named_parameters() if p.requires_grad)


@pytest.mark.parametrize("dtype,env,expected", [
    ("bfloat16", {}, "no"),  # one process / DDP: MasterWeights, no autocast
    ("bfloat16", {"ACCELERATE_USE_FSDP": "true"}, "bf16"),  # FSDP2's float32 shards, bf16 compute
    ("bfloat16", {"ACCELERATE_USE_DEEPSPEED": "true"}, "bf16"),  # DeepSpeed's bf16 optimizer
    ("float32", {"ACCELERATE_USE_DEEPSPEED": "true"}, "no"),
    ("bfloat16", {"ACCELERATE_USE_FSDP": "false", "ACCELERATE_MIXED_PRECISION": "bf16"}, "no"),  # the config's line is overridden
])
def test_which_engine_keeps_the_masters(dtype, env, expected):
    from mmrlvr.train.precision import accelerate_mixed_precision, sharded_engine_launch

    assert accelerate_mixed_precision(dtype, sharded_engine_launch(env)) == expected


def test_a_bf16_run_on_one_process_has_no_autocast(tmp_path, monkeypatch):
    """An accelerate config's `mixed_precision: bf16` would wrap the forward in autocast over the
    model's weights; model.dtype decides instead."""
    from mmrlvr.train.setup import set_threads_and_seed

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    cfg = load_config(ROOT / "configs/quickstart.yaml", ["model.dtype=bfloat16", f"output_dir={tmp_path}"])
    assert set_threads_and_seed(cfg).mixed_precision == "no"


def test_a_non_finite_gradient_leaves_the_masters_as_they_were(tiny):
    """A skipped step (NaN gradient) changes neither the float32 masters, their Adam moments, nor
    the model's bf16 weights; the next finite step moves the masters again."""
    import copy

    from accelerate import Accelerator

    from mmrlvr.train.learner import Learner
    from mmrlvr.train.precision import MasterWeights
    from mmrlvr.recipe.step import advantages_for
    from tests.train.test_nonfinite import _setup, _update

    model, batch, cfg, suppress = _setup(tiny, "train.max_nonfinite_steps=3")
    model = copy.deepcopy(model).train()  # float32: its parameters become the masters
    masters = MasterWeights(model, torch.bfloat16)
    opt = torch.optim.AdamW(masters.params(), lr=1e-3)
    learner = Learner(cfg, model, opt, Accelerator(cpu=True), suppress, masters=masters)
    adv = advantages_for(batch, cfg)
    poisoned = adv.clone()
    poisoned[2] = float("nan")
    d, s, _ = _update(model, batch, cfg, suppress, adv=adv, learner=learner)
    assert s["actor/nonfinite_skipped"] == 0.0 and d.abs().max() > 0
    kept = [m.clone() for m in masters.params()]
    moments = {k: v.clone() for k, v in opt.state[masters.params()[0]].items()}
    d, s, _ = _update(model, batch, cfg, suppress, adv=poisoned, learner=learner)
    assert s["actor/nonfinite_skipped"] == 1.0 and torch.equal(d, torch.zeros_like(d))  # bf16 weights untouched
    assert all(torch.equal(a, b) for a, b in zip(kept, masters.params()))
    assert all(torch.equal(moments[k], opt.state[masters.params()[0]][k]) for k in moments)
    assert all(p.grad is None for p in model.parameters()) and all(m.grad is None for m in masters.params())
    d, s, _ = _update(model, batch, cfg, suppress, adv=adv, learner=learner)
    assert s["actor/nonfinite_skipped"] == 0.0 and d.abs().max() > 0
    assert not all(torch.equal(a, b) for a, b in zip(kept, masters.params()))


def test_micro_batch_gradients_sum_in_float32_on_the_masters():
    """Hand-computed: a gradient of 1 then 31 of 2^-9 sum to 1 + 31/512 in float32; summed in a
    bf16 `.grad` every 2^-9 is below half of bf16's step at 1 (2^-8) and the sum stays 1.0."""
    from mmrlvr.train.precision import MasterWeights

    layer = torch.nn.Linear(1, 1, bias=False)
    masters = MasterWeights(layer, torch.bfloat16)
    for g in [1.0] + [2.0 ** -9] * 31:
        layer.weight.grad = torch.full_like(layer.weight, g)  # bf16, as one micro-batch's backward leaves it
        masters.take_grads()
        assert layer.weight.grad is None
    assert masters.params()[0].grad.item() == 1 + 31 / 512
    bf16_sum = torch.tensor(1.0, dtype=torch.bfloat16)
    for _ in range(31):
        bf16_sum += 2.0 ** -9
    assert bf16_sum.item() == 1.0  # what accumulating in the parameter's own gradient would give


def test_the_learner_moves_every_micro_batchs_gradient_onto_the_masters(tiny, monkeypatch):
    """With 4 micro-batches per optimizer step each backward's bf16 gradient goes onto the float32
    masters at once, so the step reads their float32 sum (not a bf16 sum rounded 4 times)."""
    import copy

    from accelerate import Accelerator

    from mmrlvr.train.learner import Learner
    from mmrlvr.train.precision import MasterWeights
    from tests.train.test_nonfinite import _setup, _update

    model, batch, cfg, suppress = _setup(tiny, "algo.grad_accum=4")
    model = copy.deepcopy(model).train()
    masters = MasterWeights(model, torch.bfloat16)
    opt = torch.optim.SGD(masters.params(), lr=1e-3)
    backwards, taken, at_step = [], [], []
    accelerator = Accelerator(cpu=True)
    real_backward, real_take, real_clip = accelerator.backward, masters.take_grads, accelerator.clip_grad_norm_
    monkeypatch.setattr(accelerator, "backward", lambda loss: backwards.append(1) or real_backward(loss))

    def take():
        taken.append([torch.zeros_like(m) if p.grad is None else p.grad.float() for _, p, m in masters.pairs])
        real_take()

    monkeypatch.setattr(masters, "take_grads", take)
    # what the step reads, before clipping scales it
    monkeypatch.setattr(accelerator, "clip_grad_norm_",
                        lambda ps, c: at_step.append([m.grad.clone() for m in masters.params()]) or real_clip(ps, c))
    learner = Learner(cfg, model, opt, accelerator, suppress, masters=masters)
    _update(model, batch, cfg, suppress, learner=learner)
    assert len(backwards) == 4 and len(taken) == 4 and len(at_step) == 1
    expected = [sum(parts) for parts in zip(*taken)]  # float32 sums of the four bf16 gradients
    for got, want in zip(at_step[0], expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
