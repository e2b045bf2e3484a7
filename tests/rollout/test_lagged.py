"""One step off-policy rollouts (`rollout.async_steps: 1`), in the main environment against the stand-in
server of test_server_client: which weights sample which batch, what a checkpoint records, and a
3-step training run with its staleness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from mmrlvr.config import RolloutConfig
from tests.rollout.conftest import main_env_only
from mmrlvr.data.sources import SeededStream
from mmrlvr.rollout.lagged import LaggedEngine, Lookahead
from tests.rollout.test_server_client import KEY, SAMPLES, _engine, _info, _tokens, stand_in  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[2]


def _stream():
    from mmrlvr.types import Sample

    return SeededStream([Sample(str(i), (), 0) for i in range(10)], seed=0)


def test_a_peeked_draw_is_what_the_next_take_returns_and_a_checkpoint_sees_the_state_before_it():
    plain, ahead = _stream(), Lookahead(_stream())
    before = ahead.state_dict()
    early = ahead.peek(3, 2)
    assert ahead.state_dict() == before  # a checkpoint now resumes with the same prompts for step 2
    assert ahead.take(3, 2) == early == plain.take(3, 2)
    assert ahead.state_dict() == plain.state_dict()
    ahead.peek(3, 3)
    assert [s.id for s in ahead.take(4, 3)] == [s.id for s in plain.take(4, 3)]  # another request: the draw is undone


def test_the_batch_generated_ahead_keeps_the_weights_it_started_with(stand_in, tiny):
    s = stand_in(mode="slow")  # each generation takes 3 s
    lagged = LaggedEngine(_engine(s.url, tiny, timeout=30))
    rc = RolloutConfig(max_new_tokens=4)
    t0 = time.monotonic()
    lagged.generate_ahead(SAMPLES, 2, rc, seed=7)
    assert time.monotonic() - t0 < 1  # returned at once: the update runs meanwhile
    lagged.sync_weights(tiny[0])  # waits for the generation in flight, then loads the new weights
    assert time.monotonic() - t0 >= 3
    assert s.calls.count("/generate") == 1 and s.calls[-1] == "/update_weights"
    out = lagged.rollout(SAMPLES, 2, rc, seed=7, return_logprobs=True)  # answered from the generation ahead
    assert s.calls.count("/generate") == 1
    assert out.policy_version == 0 and lagged.synced_version == 1  # staleness 1
    assert out.gen_seconds >= 3
    other = lagged.rollout(SAMPLES, 2, rc, seed=8)  # another seed: generated now, by the new weights
    assert s.calls.count("/generate") == 2 and other.policy_version == 1
    lagged.close()


@main_env_only
def test_a_three_step_async_run_is_one_step_off_policy(stand_in, tmp_path):
    from mmrlvr.models.load import load_policy

    s = stand_in()
    model, processor = load_policy("tiny")
    s.info, s.tokens = _info(model, processor), _tokens(processor)
    run = tmp_path / "run"
    # the trainer holds the stand-in server's key as a user would: in the environment
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MMRLVR_ROLLOUT_KEY": KEY}
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", "model.dtype=float32",
                           "rollout.engine=vllm_server", f"rollout.server_url={s.url}", "rollout.async_steps=1",
                           "warm_start.steps=0", "train.steps=3", "task.eval_size=4", "rollout.prompts_per_step=2",
                           "rollout.group_size=2", "train.log_every=1", f"output_dir={run}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/staleness" in r]
    assert [r["rollout/staleness"] for r in steps] == [0, 1, 1]
    assert "rollout_correction: token_tis" in (run / "config.yaml").read_text()  # the default when the sampler lags
    # the initial sync, then one per step; step 2's and 3's first rounds were generated ahead (before the
    # sync of the step before), so the only /generate after a step's sync is evaluation's
    posts = [c for c in s.calls if c in ("/generate", "/update_weights")]
    assert posts.count("/update_weights") == 4
