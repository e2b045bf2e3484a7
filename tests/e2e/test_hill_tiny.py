"""configs/hill_tiny.yaml end to end, shortened: hints are written, re-rolled and trained on, the
per-role rewards are logged."""

import json

from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train

SHORT = ["task.train_size=64", "task.eval_size=16", "warm_start.steps=4", "warm_start.batch_size=8",
         "rollout.prompts_per_step=4", "rollout.max_new_tokens=6", "train.steps=2", "train.log_every=1",
         "train.eval_every=0", "eval.batch_size=16", "rollout.episode_args.hinter_max_new_tokens=4"]


def test_hill_tiny_runs_and_logs_both_roles(tmp_path):
    summary = train(load_config("configs/hill_tiny.yaml", [*SHORT, f"output_dir={tmp_path}"]))
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time/step" in r]
    assert [r["step"] for r in steps] == [1, 2]
    # a 4-step warm start answers almost nothing right: hints are written at both steps
    for r in steps:
        assert r["hill/hard_frac"] > 0 and "reward/reasoner/mean" in r and "reward/hinter/mean" in r
        hard = round(r["hill/hard_frac"] * 4)
        passed = round(r["hill/gate_pass_frac"] * hard * 4)
        # 4 x 4 answers, 4 hints per hard prompt, 4 re-rollouts per passing hint
        assert r["hill/generated"] == 16 + 4 * hard + 4 * passed
        assert r["actor/updated_seqs_frac"] >= 0.0
    assert 0.0 <= summary["eval_after"]["accuracy"] <= 1.0
    assert (tmp_path / "samples" / "step_1.jsonl").exists()
