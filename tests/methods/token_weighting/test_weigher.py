"""Token weighting inside the step: exact with accumulation and the zero-advantage skip; the loop
logs label fractions and writes token_roles files in the agreed format."""

import copy
import json

import pytest
import torch

from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.config import load_config
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.methods.token_weighting.signals import black_fill
from mmrlvr.data.sources import SeededStream
from mmrlvr.recipe.step import advantages_for, collect
from tests.train.step_helpers import run_update, with_algo
from mmrlvr.methods.token_weighting.weigher import weigh_tokens
from mmrlvr.verifiers.score import InProcessScorer

BASE = ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6", "train.max_grad_norm=1e9"]


def _setup(tiny, extra=()):
    model, processor = tiny
    cfg = load_config(None, BASE + list(extra))
    algo = resolve_algo(cfg.algo, 6)
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 16, 0), 0), InProcessScorer(), with_algo(cfg, algo), seed=0)
    batch.rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    return cfg, algo, batch, engine.suppress_ids, black_fill(processor)


def _apply(model, batch, cfg, algo, suppress, weights):
    """One update with `weights`: an (N, T) tensor, None, or a weighting (`weigh_tokens`' result)."""
    from accelerate import Accelerator

    weights, pending = (weights, None) if weights is None or torch.is_tensor(weights) else (weights.weights, weights.pending)

    model = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    stats = run_update(model, None, opt, Accelerator(cpu=True), batch, cfg, algo, suppress, seed=0, token_weights=weights,
                       pending=pending)
    torch.set_num_threads(1)
    return [p.detach() - b for p, b in zip(model.parameters(), before)], stats


def _max_diff(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


@pytest.mark.parametrize("method", ["tor", "entropy_topk"])
def test_weighted_update_is_exact_under_grad_accumulation(fresh_tiny, method):
    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, [f"token_weighting.method={method}"])
    adv = advantages_for(batch, with_algo(cfg, algo))
    tw = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=1, fill=fill)
    assert tw.weights.shape == batch.completion_ids.shape
    assert not torch.equal(tw.weights, batch.completion_mask.float())  # the weights do something
    d1, s1 = _apply(model, batch, cfg, algo, suppress, tw.weights)
    cfg.algo.grad_accum = 8
    d8, s8 = _apply(model, batch, cfg, resolve_algo(cfg.algo, 6), suppress, tw.weights)
    assert _max_diff(d1, d8) < 1e-5 and s1["loss/policy"] == pytest.approx(s8["loss/policy"], abs=1e-6)
    # and they change the update compared with no weights
    d0, _ = _apply(model, batch, cfg, algo, suppress, None)
    assert _max_diff(d0, d1) > 1e-4


def test_weighted_update_skips_zero_advantage_rows_exactly(fresh_tiny):
    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, ["token_weighting.method=tor"])
    batch.rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    adv = advantages_for(batch, with_algo(cfg, algo))
    tw = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=1, fill=fill)
    assert tw.rows == [0, 1, 2, 3]  # signals only for the rows the gradient sees
    assert torch.equal(tw.weights[4:], batch.completion_mask[4:].float())
    d_skip, stats = _apply(model, batch, cfg, algo, suppress, tw.weights)
    assert stats["actor/updated_seqs_frac"] == 0.5
    cfg.algo.entropy_coef = 1e-12  # forces every row through the forward
    d_all, stats_all = _apply(model, batch, cfg, resolve_algo(cfg.algo, 6), suppress, tw.weights)
    assert stats_all["actor/updated_seqs_frac"] == 1.0
    assert _max_diff(d_skip, d_all) < 1e-5


def test_weights_computed_once_per_batch_do_not_depend_on_diagnostics(fresh_tiny):
    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, ["token_weighting.method=entropy_topk"])
    adv = advantages_for(batch, with_algo(cfg, algo))
    plain = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=1, fill=fill)
    diag = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=1, fill=fill, diagnose=True)
    assert set(plain.signals) == {"entropy"} and set(diag.signals) == {"entropy", "visual_dependency"}
    assert torch.equal(plain.weights, diag.weights)
    assert "tokens/perception_frac" in diag.metrics and "tokens/perception_frac" not in plain.metrics
    none = load_config(None, BASE)
    assert weigh_tokens(model, batch, adv, none, algo, suppress, step=1, fill=fill).weights is None  # nothing computed


def test_corruption_is_reseeded_every_step_and_read_at_the_sampling_temperature(fresh_tiny):
    from mmrlvr.data.collate import select_rows
    from mmrlvr.methods.token_weighting.signals import compute_signals

    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, ["token_weighting.method=vppo", "seed=3",
                                                           "rollout.temperature=1.3"])
    adv = advantages_for(batch, with_algo(cfg, algo))
    deps = []
    for step in (1, 2):
        tw = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=step, fill=fill)
        rows, mask = tw.rows, batch.completion_mask[tw.rows]
        # the step's corruption seed: seed * 1_000_003 + step
        want = compute_signals(model, select_rows(batch.prompt_inputs, rows), batch.completion_ids[rows], mask,
                               ["visual_dependency"], temperature=1.3, suppress_ids=suppress,
                               corrupt_prob=cfg.token_weighting.corrupt_prob, seed=3 * 1_000_003 + step, fill=fill)
        assert torch.allclose(tw.signals["visual_dependency"], want["visual_dependency"], atol=1e-6)
        deps.append(tw.signals["visual_dependency"])
    assert not torch.allclose(deps[0], deps[1])  # another step, other patches blacked out


def test_pepo_weighs_with_the_similarity_its_variant_names(fresh_tiny):
    from mmrlvr.algos.token_weights import token_weights
    from mmrlvr.data.collate import select_rows
    from mmrlvr.methods.token_weighting.signals import compute_signals

    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, ["token_weighting.method=pepo", "train.steps=4"])
    adv = advantages_for(batch, with_algo(cfg, algo))
    for variant, source in [("released", dict(similarity_layers=None, similarity_at_token=True)),
                            ("minmax", dict(similarity_layers=[-1], similarity_at_token=False))]:
        cfg.token_weighting.pepo_variant = variant
        tw = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=1, fill=fill)
        rows, mask = tw.rows, batch.completion_mask[tw.rows]
        want = compute_signals(model, select_rows(batch.prompt_inputs, rows), batch.completion_ids[rows], mask,
                               ["entropy", "visual_similarity"], temperature=cfg.rollout.temperature,
                               suppress_ids=suppress, **source)
        assert torch.allclose(tw.signals["visual_similarity"], want["visual_similarity"], atol=1e-6)
        # step 1 of 4: progress 0.25 -> weights 0.75 + 0.25 w
        w = token_weights("pepo", want, mask, progress=0.25, pepo_variant=variant)
        assert torch.allclose(tw.weights[rows], w, atol=1e-6)


def test_loop_logs_token_diagnostics_and_writes_token_roles(tmp_path, monkeypatch):
    from pathlib import Path

    from mmrlvr.methods.token_weighting import weigher as token_roles
    from mmrlvr.recipe.loop import train

    progress = []
    real = token_roles.token_weights

    def spy(method, signals, mask, **params):
        progress.append(params["progress"])
        return real(method, signals, mask, **params)

    monkeypatch.setattr(token_roles, "token_weights", spy)
    plugin = Path(__file__).parents[2] / "e2e" / "user_verifier.py"
    cfg = load_config("configs/quickstart.yaml", [
        "task.train_size=32", "task.eval_size=8", "warm_start.steps=0", "rollout.prompts_per_step=2",
        "rollout.group_size=4", "rollout.max_new_tokens=6", "train.steps=2", "train.log_every=2",
        "train.save_every=0", f"output_dir={tmp_path / 'run'}", "verifier_workers=0",
        f"rewards=[{{verifier: {plugin}:even_length}}]", "token_weighting.method=vppo",
        "token_weighting.roles_per_step=3",
    ])
    train(cfg)
    run = tmp_path / "run"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in rows if "reward/mean" in r}
    informative = [s for s, r in steps.items() if r["rollout/mixed_group_frac"] > 0]
    assert informative, "the parity reward should give mixed groups"
    # the schedule pepo reads: progress = step / train.steps, through the loop's own step count
    assert progress == [s / 2 for s in sorted(informative)]
    for s in informative:
        r = steps[s]
        assert {"time/token_signals", "tokens/visual_dependency", "tokens/weight_mean", "tokens/dependent_frac"} <= set(r)
        assert 0.0 <= r["tokens/dependent_frac"] <= 1.0
        # vppo alone needs no entropy; the labels come with the diagnostics of logging steps
        assert ("tokens/perception_frac" in r) == (s in (1, 2))
        fracs = r["tokens/perception_frac"] + r["tokens/reasoning_frac"] + r["tokens/both_frac"] + r["tokens/other_frac"]
        assert fracs == pytest.approx(1.0)
    for s in informative:
        lines = (run / "token_roles" / f"step_{s}.jsonl").read_text().splitlines()
        assert 1 <= len(lines) <= 3
        rec = json.loads(lines[0])
        assert set(rec) == {"step", "sample_id", "row", "reward", "advantage", "tokens", "token_ids",
                            "signals", "labels", "weights", "method"}
        n = len(rec["token_ids"])
        assert rec["step"] == s and rec["method"] == "vppo" and n >= 1
        assert len(rec["tokens"]) == len(rec["labels"]) == len(rec["weights"]) == n
        assert set(rec["signals"]) == {"entropy", "visual_dependency"}
        assert all(len(v) == n for v in rec["signals"].values())
        assert set(rec["labels"]) <= {"perception", "reasoning", "both", "other"}
        assert rec["advantage"] != 0 and min(rec["weights"]) >= 0


@pytest.mark.parametrize("override, match", [
    ("token_weighting.method=vpo", "token_weighting.method='vpo': one of entropy_topk, kawhi, none, pepo, tor, vppo"),
    ("token_weighting.top_frac=0", "token_weighting.top_frac=0.0: expected a number in"),
    ("token_weighting.corrupt_prob=1.5", "token_weighting.corrupt_prob=1.5: expected a probability"),
    ("token_weighting.tor_other=-1", "token_weighting.tor_other=-1.0: expected a finite number >= 0"),
    ("token_weighting.similarity_layers=[]", "token_weighting.similarity_layers=\\[\\]"),
    ("token_weighting.pepo_variant=paper", "token_weighting.pepo_variant='paper': expected released or minmax"),
    ("temporal_contrast.correct_threshold=1.0", "temporal_contrast.correct_threshold=1.0: expected a number in \\[0, 1\\)"),
])
def test_bad_token_weighting_settings_fail_before_training(tmp_path, override, match):
    from mmrlvr.config import ConfigError
    from mmrlvr.recipe.loop import train

    cfg = load_config(None, [override, f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=match):
        train(cfg)
    assert not (tmp_path / "run").exists()  # nothing written, no model loaded


def test_the_weigher_weighs_at_the_step_it_is_given(fresh_tiny):
    """PEPO's weights move with training progress (step / train.steps): the weigher the learner
    owns must weigh at the step it is handed, not one behind."""
    from mmrlvr.methods.token_weighting.weigher import TokenWeigher

    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, ["token_weighting.method=pepo", "train.steps=4"])
    adv = advantages_for(batch, with_algo(cfg, algo))
    got = TokenWeigher(with_algo(cfg, algo), suppress, fill=fill).start(model, batch, adv, step=3)
    at3 = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=3, fill=fill)
    at2 = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=2, fill=fill)
    assert torch.equal(got.weights, at3.weights)
    assert not torch.allclose(at2.weights, at3.weights)  # so the step matters here
