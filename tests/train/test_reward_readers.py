"""With temporal contrast on, what reads a prompt's rewards to learn its pass rate (prompt replay,
DBB's posteriors, the per-prompt statistics) reads the verifiers' rewards, not the bonus-added
ones; the bonus still moves the trained advantage. Hand-computed."""

import pytest
import torch

from mmrlvr.algos.advantages import EstimatorContext
from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.config.efficiency import max_reward
from mmrlvr.data.sources import PromptStats
from mmrlvr.recipe.loop import prompt_source
from mmrlvr.recipe.step import advantages_for
from mmrlvr.types import RolloutBatch, Sample

TC = ["temporal_contrast.enabled=true", "temporal_contrast.alpha=0.3", "rewards=[{verifier: count, weight: 1.0}]"]


def test_a_prompt_right_4_of_5_times_reads_0_8_and_is_not_replayed_above_the_band():
    cfg = load_config(None, TC + ["sample_efficiency.replay.enabled=true", "sample_efficiency.replay.cooldown=0"])
    assert max_reward(cfg) == 1.0  # the verifiers' largest reward, the bonus not in it
    src = prompt_source([Sample(f"p{i}", (), None) for i in range(4)], cfg)
    taken = [s.id for s in src.take(2, 0)]
    src.feedback(0, taken, [[1.0, 1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]])
    assert src.pass_rate[src._index[taken[0]]] == pytest.approx(0.8)  # not 0.8 / 1.3 = 0.62
    assert src.pass_rate[src._index[taken[1]]] == pytest.approx(0.2)
    assert src.queue_order() == []  # 0.8 > max_pass_rate 0.7 and 0.2 < min_pass_rate 0.24


def test_dbb_posteriors_learn_the_verifier_rewards_and_the_bonus_moves_the_advantage():
    cfg = load_config(None, TC + ["sample_efficiency.dbb.enabled=true", "sample_efficiency.dbb.lam=0.5",
                                  "sample_efficiency.dbb.scale=none", "rollout.group_size=5"])
    cfg = resolve_config(cfg)  # the config the step reads: algo.advantage dbb
    verifier = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]])
    bonus = torch.tensor([[0.0] * 5, [0.3, 0.0, 0.0, 0.0, 0.0]])  # a's gate closed, b's open
    n, t = 10, 3
    batch = RolloutBatch([Sample("a", (), None), Sample("b", (), None)], {}, torch.zeros(n, t, dtype=torch.long),
                         torch.ones(n, t), torch.zeros(n, dtype=torch.bool), verifier + bonus, [""] * n, [None] * n, {},
                         bonus=bonus)
    stats = PromptStats()
    adv = advantages_for(batch, cfg, EstimatorContext(["a", "b"], 1, stats))
    # prior (1, 1), lam 0.5: a: alpha 0.5 + 4 = 4.5, beta 0.5 + 1 = 1.5, p = 0.75;
    #                        b: alpha 0.5 + 1 = 1.5, beta 0.5 + 4 = 4.5, p = 0.25
    assert stats.extra("a")["dbb"] == pytest.approx([4.5, 1.5]) and stats.extra("b")["dbb"] == pytest.approx([1.5, 4.5])
    # scale none: r + bonus - p; b's right answer 1 + 0.3 - 0.25
    want = torch.tensor([[0.25] * 4 + [-0.75], [1.05] + [-0.25] * 4])
    assert torch.allclose(adv.view(2, 5), want.double().to(adv.dtype), atol=1e-6)
