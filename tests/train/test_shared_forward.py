"""Token signals from the update's own forward (`token_weighting.share_forward`): the same weights
and the same update as with their own clean forward, on mixed completion lengths at temperature != 1."""

import pytest
import torch
from accelerate import Accelerator

from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.recipe.step import advantages_for
from mmrlvr.methods.token_weighting.weigher import PendingWeighting, shares_forward, signals_needed, weigh_tokens
from tests.train.step_helpers import run_update, with_algo
from tests.methods.token_weighting.test_weigher import _apply, _max_diff, _setup

# rows end after these many tokens (the sampler gave all 8 rows 6): the signals' forwards trim to
# the weighted rows' longest completion, the update's to its rows' longest; both must agree
LENGTHS = torch.tensor([6, 2, 4, 1, 5, 3, 6, 2])


def _mixed(batch):
    t = batch.completion_ids.shape[1]
    assert t >= int(LENGTHS.max())
    batch.completion_mask = (torch.arange(t)[None] < LENGTHS[:, None]).long()
    batch.truncated = torch.zeros(len(LENGTHS), dtype=torch.bool)
    return batch


@pytest.mark.parametrize("method,extra", [
    ("vppo", ["token_weighting.vppo_top_frac=0.3", "token_weighting.vppo_beta_min=0.6"]),
    ("tor", ["token_weighting.tor_other=0.25", "token_weighting.tor_both=3.0", "token_weighting.perception_frac=0.3"]),
])
def test_shared_forward_gives_the_same_weights_and_update(fresh_tiny, method, extra):
    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, [f"token_weighting.method={method}", "seed=5",
                                                           "rollout.temperature=0.7", *extra])
    batch = _mixed(batch)
    adv = advantages_for(batch, with_algo(cfg, algo))
    assert shares_forward(cfg, algo, signals_needed(method, False))
    own = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=2, fill=fill)
    pending = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=2, fill=fill, share=True)
    assert isinstance(pending, PendingWeighting) and pending.result is None  # nothing ran yet
    # the step hands both alike to the update: `update(batch, adv, tw.weights, pending=tw.pending)`, then `tw.result`
    assert pending.weights is None and pending.pending is pending
    assert own.pending is None and own.result is own
    d_own, s_own = _apply(model, batch, cfg, algo, suppress, own.weights)
    d_shared, s_shared = _apply(model, batch, cfg, algo, suppress, pending)
    got = pending.result
    assert pending.pending is None  # finished: nothing left for another update
    assert got.rows == own.rows
    assert not torch.equal(own.weights, batch.completion_mask.float())  # the weights do something
    assert torch.allclose(got.weights, own.weights, atol=1e-6)
    assert torch.allclose(got.signals["visual_dependency"], own.signals["visual_dependency"], atol=1e-6)
    assert got.weights[~batch.completion_mask.bool()].abs().max() == 0  # padding weighs nothing
    assert _max_diff(d_own, d_shared) < 1e-6
    assert s_shared["loss/policy"] == pytest.approx(s_own["loss/policy"], abs=1e-6)
    d_none, _ = _apply(model, batch, cfg, algo, suppress, None)
    assert _max_diff(d_none, d_own) > 1e-4  # so the comparison above is not between two unweighted updates


def test_sharing_is_refused_where_the_update_is_not_one_forward(fresh_tiny):
    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, ["token_weighting.method=vppo"])
    adv = advantages_for(batch, with_algo(cfg, algo))
    assert not shares_forward(cfg, algo, signals_needed("pepo", False))  # hidden states: its own forward
    cfg.token_weighting.share_forward = False
    assert not shares_forward(cfg, algo, signals_needed("vppo", False))
    cfg.token_weighting.share_forward = True
    cfg.algo.grad_accum = 2
    two = resolve_algo(cfg.algo, 6)
    assert not shares_forward(cfg, two, signals_needed("vppo", False))
    with pytest.raises(ValueError, match="cannot share"):
        weigh_tokens(model, batch, adv, cfg, two, suppress, step=1, fill=fill, share=True)
    pending = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=1, fill=fill, share=True)
    with pytest.raises(ValueError, match="one forward per update"):
        _apply(model, batch, cfg, two, suppress, pending)
    with pytest.raises(ValueError, match="not both"):
        run_update(model, None, torch.optim.SGD(model.parameters(), lr=0.0), Accelerator(cpu=True), batch, cfg, algo,
                   suppress, token_weights=batch.completion_mask.float(), pending=pending)


def test_the_learners_weigher_decides_where_the_signals_come_from(fresh_tiny):
    """`Learner.weigh_and_update`: the weigher shares the update's forward where it can (one
    forward fewer) and takes the signals' own forwards where told not to; both give the weights and
    the update of weighing by hand, and the step never asks which it got."""
    import copy
    import dataclasses

    from mmrlvr.models.wrapping import base_model
    from mmrlvr.train.learner import Learner
    from mmrlvr.methods.token_weighting.weigher import TokenWeigher

    model, _ = fresh_tiny
    cfg, algo, batch, suppress, fill = _setup(fresh_tiny, ["token_weighting.method=vppo", "seed=5",
                                                           "rollout.temperature=0.7", "token_weighting.vppo_top_frac=0.3"])
    batch = _mixed(batch)
    adv = advantages_for(batch, with_algo(cfg, algo))
    own = weigh_tokens(model, batch, adv, cfg, algo, suppress, step=2, fill=fill)
    d_own, s_own = _apply(model, batch, cfg, algo, suppress, own.weights)
    forwards = {}
    for share in (True, False):
        full = with_algo(dataclasses.replace(cfg, token_weighting=dataclasses.replace(cfg.token_weighting,
                                                                                      share_forward=share)), algo)
        m = copy.deepcopy(model)
        before = [p.detach().clone() for p in m.parameters()]
        calls = []
        hook = base_model(m).register_forward_pre_hook(lambda *_: calls.append(1))
        learner = Learner(full, m, torch.optim.SGD(m.parameters(), lr=1.0), Accelerator(cpu=True), suppress,
                          weigher=TokenWeigher(full, suppress, fill=fill))
        stats, tw = learner.weigh_and_update(batch, adv, step=2)
        hook.remove()
        torch.set_num_threads(1)
        forwards[share] = len(calls)
        assert tw.pending is None and tw.rows == own.rows  # finished either way
        assert torch.allclose(tw.weights, own.weights, atol=1e-6)
        assert _max_diff([p.detach() - b for p, b in zip(m.parameters(), before)], d_own) < 1e-6
        assert stats["loss/policy"] == pytest.approx(s_own["loss/policy"], abs=1e-6)
        if share:  # the update's time holds the signals it finished from its forward (nested intervals)
            assert stats["time/update"] >= tw.metrics["time/token_signals"] > 0
    assert forwards[True] == forwards[False] - 1  # the signals' clean forward was the update's own
    bare = Learner(with_algo(cfg, algo), copy.deepcopy(model), torch.optim.SGD(model.parameters(), lr=0.0),
                   Accelerator(cpu=True), suppress)
    assert bare.weigh_and_update(batch, adv, step=2)[1] is None  # no weigher: every token weighs 1
