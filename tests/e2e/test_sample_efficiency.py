"""Each sample-efficiency method, switched on in a tiny real run of `mmrlvr.recipe.loop.train`,
acts and logs its metrics: replays happen, DBB moves the policy on all-equal groups, demos appear
in the prompts at the scheduled rate."""

import json
from pathlib import Path

import pytest

from mmrlvr.config import load_config
from mmrlvr.methods.demos.source import demo_probability, wants_demos
from mmrlvr.recipe.loop import train

ROOT = Path(__file__).resolve().parents[2]
SE = "sample_efficiency"
SMALL = [
    "task.train_size=8", "task.eval_size=4", "warm_start.steps=1", "warm_start.batch_size=4",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=6",
    "train.steps=4", "train.save_every=4", "train.log_every=1", "train.lr=1e-3", "eval.batch_size=8",
    "verifier_workers=0",
]
EVEN = f"rewards=[{{verifier: {ROOT / 'tests/e2e/user_verifier.py'}:even_length}}]"  # mixed groups


def _run(tmp_path: Path, *overrides: str) -> tuple[dict, dict]:
    run = tmp_path / "run"
    train(load_config(ROOT / "configs/quickstart.yaml", [*SMALL, *overrides, f"output_dir={run}"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = {r["step"]: r for r in rows if "reward/mean" in r}
    return steps, json.loads((run / "checkpoints" / "step_4" / "state.json").read_text())


def test_replay_reuses_medium_prompts(tmp_path):
    steps, state = _run(tmp_path, EVEN, f"{SE}.replay.enabled=true", f"{SE}.replay.cooldown=1",
                        f"{SE}.replay.max_pass_rate=0.8")
    for s in steps.values():
        assert {"replay/frac", "replay/queue", "replay/mean_reuse"} <= s.keys()
        assert s["replay/frac"] <= 0.5  # at most P // 2 = 2 of 4 prompts
    assert steps[1]["replay/frac"] == 0  # nothing to replay yet
    assert any(s["replay/frac"] > 0 for s in steps.values())  # with cooldown 1, medium prompts come back
    src = state["source"]
    # every replay counted once: the fresh stream handed out 16 prompts minus the replays, and it
    # moves past (without handing out) a prompt that was already replayed in the same step
    assert 0 < 16 - src["pos"] <= sum(src["reuse"].values())
    assert src["in_flight"] == {}  # every taken prompt was fed back
    visits = sum(e["visits"] for e in state["prompt_stats"].values())
    assert visits == 16


def test_dbb_learns_from_all_equal_groups(tmp_path):
    """The count reward is 0 for every completion at this size: every group is all-equal, GRPO's
    advantages are all 0, DBB's are not (the prompt's posterior says it should sometimes pass)."""
    grpo, _ = _run(tmp_path / "grpo")
    assert all(s["reward/mean"] == 0 for s in grpo.values())
    assert all(s["actor/updated_seqs_frac"] == 0 for s in grpo.values())
    steps, state = _run(tmp_path / "dbb", f"{SE}.dbb.enabled=true", f"{SE}.dbb.lam=0.8")
    assert all(s["reward/mean"] == 0 for s in steps.values())
    assert all(s["actor/updated_seqs_frac"] == 1 and s["actor/grad_norm"] > 0 for s in steps.values())
    # posteriors in the run state, hand-computed: 4 zero rewards a visit, lam 0.8, prior (1, 1):
    # alpha_v = 0.8^v; beta_v = 0.8 beta_{v-1} + 4 (v=1: 4.8, v=2: 7.84, v=3: 10.272)
    beta = {1: 4.8, 2: 7.84, 3: 10.272, 4: 12.2176}
    for sid, e in state["prompt_stats"].items():
        a, b = e["extra"]["dbb"]
        assert a == pytest.approx(0.8 ** e["visits"]) and b == pytest.approx(beta[e["visits"]]), sid


def test_demos_follow_the_schedule(tmp_path):
    # p_t = 1.0 * max(0, 1 - t / 3): 2/3, 1/3, 0, 0
    steps, state = _run(tmp_path, EVEN, f"{SE}.demos.enabled=true", f"{SE}.demos.p0=1.0",
                        f"{SE}.demos.anneal_steps=3", f"{SE}.demos.k=1", "seed=3")
    samples = {}
    for t in (1, 2, 3, 4):
        rows = [json.loads(x) for x in (tmp_path / "run" / "samples" / f"step_{t}.jsonl").read_text().splitlines()]
        samples[t] = {r["id"]: r["prompt_text"] for r in rows}
    for t, s in steps.items():
        p = demo_probability(t, 1.0, 3)
        # the prompts the run drew at step t, and the seeded draw each must have got
        drawn = {sid: wants_demos(3, t, sid, p) for sid in samples[t]}
        for sid, text in samples[t].items():
            question_turns = text.count("How many")
            assert question_turns == (2 if drawn[sid] else 1), (t, sid, text)  # k=1 demo before the question
        assert len(drawn) == 4  # the samples file shows every prompt of the step
        assert s["demos/frac"] == sum(drawn.values()) / 4
    assert steps[3]["demos/frac"] == steps[4]["demos/frac"] == 0.0
    assert steps[1]["demos/frac"] > 0


def test_dbb_posteriors_of_every_rank_are_saved(tmp_path):
    """Two processes (torchrun, gloo): each rank computes DBB for its own prompts; the saved run
    state (rank 0's) must hold every prompt's posterior. Count reward 0 everywhere, G = 4, lam 0.8:
    one visit gives (0.8 * 1, 0.8 * 1 + 4) = (0.8, 4.8)."""
    import os
    import subprocess
    import sys

    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = [*SMALL, "train.steps=2", "train.save_every=2", f"{SE}.dbb.enabled=true", f"{SE}.dbb.lam=0.8",
            f"output_dir={run}"]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                           "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads((run / "checkpoints" / "step_2" / "state.json").read_text())["prompt_stats"]
    assert sum(e["visits"] for e in stats.values()) == 8  # 2 steps x 4 prompts, both ranks'
    beta = {1: 4.8, 2: 7.84}
    for sid, e in stats.items():
        a, b = e["extra"]["dbb"]
        assert a == pytest.approx(0.8 ** e["visits"]) and b == pytest.approx(beta[e["visits"]]), sid
