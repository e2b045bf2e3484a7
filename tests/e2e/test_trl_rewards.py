"""A TRL user's reward function trains unchanged, named in YAML or passed to `mmrlvr.run`; a reward
that fails on every item of a step stops the run with one line and a non-zero exit, the last
checkpoint intact."""

import json
from pathlib import Path

import pytest

from mmrlvr.cli import main

ROOT = Path(__file__).resolve().parents[2]
REWARDS = ROOT / "tests/e2e/trl_rewards.py"
SMALL = ["task.train_size=8", "task.eval_size=4", "warm_start.steps=0", "rollout.prompts_per_step=2",
         "rollout.group_size=4", "rollout.max_new_tokens=7", "train.log_every=1", "eval.batch_size=8"]


def _steps(run: Path) -> dict:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in rows if "reward/mean" in r}


def test_trl_reward_len_named_in_yaml_trains_in_the_verifier_pool(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "configs/quickstart.yaml", *SMALL, "train.steps=2", "train.save_every=2",
                 "verifier_workers=1", f"rewards=[{{verifier: {REWARDS}:reward_len}}]", f"output_dir={run}"]) == 0
    steps = _steps(run)
    assert sorted(steps) == [1, 2]
    for step, m in steps.items():
        done = [json.loads(x) for x in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        expected = sum(-abs(20 - len(d["completion"])) for d in done) / len(done)
        assert m["reward/reward_len"] == pytest.approx(expected) and expected < 0  # TRL's scores, unclipped
        assert m["verifier/failed_frac"] == 0.0


def test_trl_reward_passed_to_mmrlvr_run(tmp_path):
    import importlib.util

    import mmrlvr

    spec = importlib.util.spec_from_file_location("trl_rewards_api", REWARDS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summary = mmrlvr.run(ROOT / "configs/quickstart.yaml", rewards=[module.reward_len],
                         overrides=[*SMALL, "train.steps=1", "train.save_every=1", "verifier_workers=0",
                                    f"output_dir={tmp_path / 'run'}"])
    assert summary["steps"] == 1
    assert _steps(tmp_path / "run")[1]["reward/reward_len"] < 0


def test_a_reward_failing_on_every_item_stops_the_run_with_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", "configs/quickstart.yaml", *SMALL, "train.steps=4", "train.save_every=1",
                 "verifier_workers=0", f"rewards=[{{verifier: {REWARDS}:breaks_after_twelve_items}}]",
                 f"output_dir={run}"])
    err = capsys.readouterr().err
    assert code == 2
    lines = [x for x in err.splitlines() if x.startswith("mmrlvr: error:")]
    assert len(lines) == 1 and "breaks_after_twelve_items" in lines[0] and "on all 8 items of this step" in lines[0]
    assert "the grader's service went away" in lines[0]
    assert sorted(_steps(run)) == [1]  # step 2 never trained on the zeros
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1"]


def test_a_signature_of_no_known_shape_is_refused_before_the_model_loads(tmp_path, capsys):
    code = main(["train", "configs/quickstart.yaml", *SMALL, f"rewards=[{{verifier: {REWARDS}:takes_three}}]",
                 f"output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and "rewards[0].verifier" in err and "expected fn(completion, sample)" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_weights_and_shapes_of_python_rewards_are_checked_before_staging(tmp_path):
    import mmrlvr
    from mmrlvr.api import pickled_rewards
    from mmrlvr.config import ConfigError

    def reward_len(completions, **kwargs):
        return [-abs(20 - len(c)) for c in completions]

    def ours(completion, sample):
        return 1.0

    staged = pickled_rewards([ours, (reward_len, 0.25)])
    assert [(n, w) for n, _, w in staged] == [("ours", 1.0), ("reward_len", 0.25)]
    for bad, match in [((ours, float("nan")), "weight nan: expected a finite number"),
                       (lambda a, b, c: 0.0, r"takes \(a, b, c\); expected")]:
        with pytest.raises(ConfigError, match=match):
            mmrlvr.run(ROOT / "configs/quickstart.yaml", rewards=[bad],
                       overrides=[*SMALL, f"output_dir={tmp_path / 'run'}"])
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_rewards_from_python_take_a_weight_each(tmp_path):
    """`rewards=[(fn, weight), fn]`: each term is weighted in the summed reward (here 0.5, -2 and 1),
    and the weights are saved in config.yaml, so a resume or a rerun scores the same."""
    import importlib.util

    import yaml

    import mmrlvr

    spec = importlib.util.spec_from_file_location("trl_rewards_weights", REWARDS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = tmp_path / "run"
    mmrlvr.run(ROOT / "configs/quickstart.yaml", rewards=[(module.reward_len, 0.5), (module.compute_score, -2.0),
                                                          module.reward_len_async],
               overrides=[*SMALL, "train.steps=1", "train.save_every=1", "verifier_workers=0", f"output_dir={run}"])
    saved = yaml.safe_load((run / "config.yaml").read_text())["rewards"]
    assert [(r["verifier"].rsplit(":", 1)[1], r["weight"]) for r in saved] == [
        ("reward_len", 0.5), ("compute_score", -2.0), ("reward_len_async", 1.0)]
    m = _steps(run)[1]
    done = [json.loads(x) for x in (run / "samples" / "step_1.jsonl").read_text().splitlines()]
    lengths = [len(d["completion"]) for d in done]
    assert m["reward/reward_len"] == pytest.approx(sum(-abs(20 - n) for n in lengths) / len(done))
    assert m["reward/compute_score"] == pytest.approx(sum(n % 2 == 0 for n in lengths) / len(done))
    assert m["reward/reward_len_async"] == pytest.approx(m["reward/reward_len"])  # awaited, same scores
    assert m["reward/mean"] == pytest.approx(0.5 * m["reward/reward_len"] - 2.0 * m["reward/compute_score"]
                                             + m["reward/reward_len_async"], abs=1e-5)
