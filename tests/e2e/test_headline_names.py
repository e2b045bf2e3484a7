"""The numbers a run ends with are named for what they measure, end to end: a grounding run's
headline is mean IoU in the dict `mmrlvr.run` returns, in summary.json and in the printed line,
and the dict names the final model directory."""

import json
from pathlib import Path

import mmrlvr

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["task.train_size=4", "task.eval_size=2", "warm_start.steps=0", "rollout.prompts_per_step=2",
         "rollout.group_size=2", "rollout.max_new_tokens=6", "train.steps=1", "train.save_every=0",
         "eval.batch_size=2", "verifier_workers=0"]


def test_a_grounding_run_says_mean_iou_and_where_its_model_is(tmp_path, capfd):
    run = tmp_path / "run"
    summary = mmrlvr.run(ROOT / "configs/grounding_tiny.yaml", overrides=[*SMALL, f"output_dir={run}"])
    printed = capfd.readouterr().err
    assert summary["headline"] == "mean_iou" and summary["eval_after"]["headline"] == "mean_iou"
    assert json.loads((run / "summary.json").read_text())["headline"] == "mean_iou"
    assert summary["model_dir"] == str(run / "model") and (run / "model" / "config.json").is_file()
    line = next(x for x in printed.splitlines() if "before RL" in x and "after RL" in x)
    assert line.startswith("held-out mean IoU: before RL ") and "accuracy" not in line, line
