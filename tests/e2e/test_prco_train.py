"""configs/prco_tiny.yaml end to end, shortened: both roles' rewards are logged every step, the
held-out evaluation runs (the Observer/Solver pipeline) and the update runs on both roles' rows."""

import json

from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train


def test_prco_tiny_runs_and_logs_each_roles_reward(tmp_path):
    run = tmp_path / "prco"
    cfg = load_config("configs/prco_tiny.yaml", [
        f"output_dir={run}", "task.train_size=32", "task.eval_size=8", "warm_start.steps=3", "warm_start.batch_size=8",
        "rollout.max_new_tokens=6", "train.steps=2", "train.log_every=1", "train.eval_every=0", "verifier_workers=0"])
    summary = train(cfg)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/observer/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        for key in ("reward/solver/mean", "reward/observer/leak_frac", "reward/observer/utility",
                    "reward/solver/count", "reward/observer/as_answer/count"):
            assert key in r, key
        assert 0.0 <= r["reward/observer/leak_frac"] <= 1.0
    assert summary["eval_after"]["n"] == 8 and "accuracy" in summary["eval_after"]
    assert all("loss/policy" in r for r in steps)
