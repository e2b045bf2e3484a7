"""The sample-efficiency benchmark reads its held-out curve from metrics.jsonl by the task's headline
metric (accuracy, mean_iou, ...), so "rollouts to target" works for grounding as for answers."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sample_efficiency", ROOT / "benchmarks/learning/sample_efficiency.py")
se = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(se)

# A grounding run as the loop logs it: eval rows at step 0 (before RL), every 10 steps, and the final
# one at step 40, beside the training rows. `reward` (IoU plus a format term) runs ahead of mean_iou,
# so reading the wrong key changes the answer.
GROUNDING = [
    {"step": 0, "eval/grounding/reward": 0.40, "eval/grounding/iou": 0.21, "eval/grounding/mean_iou": 0.21},
    {"step": 1, "time/step": 1.2, "reward/mean": 0.3, "rollout/mixed_group_frac": 0.7},
    {"step": 10, "time/step": 1.3, "reward/mean": 0.4, "eval/grounding/reward": 0.62,
     "eval/grounding/iou": 0.34, "eval/grounding/mean_iou": 0.34},
    {"step": 20, "time/step": 1.1, "eval/grounding/reward": 0.75, "eval/grounding/mean_iou": 0.55},
    {"step": 30, "time/step": 1.1, "eval/grounding/reward": 0.70, "eval/grounding/mean_iou": 0.49},
    {"step": 40, "eval/grounding/reward": 0.95, "eval/grounding/mean_iou": 0.91},
]


def test_grounding_curve_reads_mean_iou():
    key = se.headline_key(GROUNDING, before=0.21, names={"accuracy", "mean_iou"})
    assert key == "eval/grounding/mean_iou"
    curve = se.eval_curve(GROUNDING, key)
    assert curve == [[0, 0.21], [10, 0.34], [20, 0.55], [30, 0.49], [40, 0.91]]
    # target 0.5, 16 prompts x 8 completions = 128 rollouts a step: first reached at step 20 -> 20 * 128
    assert se.rollouts_to_target(curve, 0.5, 128) == 2560
    assert se.rollouts_to_target(curve, 0.55, 128) == 2560  # reaching the target exactly counts
    assert se.rollouts_to_target(curve, 0.5, 96) == 1920  # 12 prompts x 8: 20 * 96
    # 0.9 only at the final evaluation: 40 * 128
    assert se.rollouts_to_target(curve, 0.9, 128) == 5120
    assert se.rollouts_to_target(curve, 0.95, 128) is None  # never reached
    assert se.rollouts_to_target(curve, 0.2, 128) == 0  # already there before RL


def test_registered_headlines_name_grounding_and_answers():
    names = se.headline_names()
    assert {"accuracy", "mean_iou"} <= names
    assert "reward" not in names and "iou" not in names  # a term's name is not a headline
    assert se.headline_key(GROUNDING, before=0.21) == "eval/grounding/mean_iou"


def test_two_headlines_pick_the_one_the_summary_reports():
    # A mixed task logs accuracy (answers) and mean_iou (boxes); the summary's accuracy before RL was
    # 0.25, which is mean_iou's step-0 value, so mean_iou is the curve.
    rows = [{"step": 0, "eval/mix/accuracy": 0.5, "eval/mix/mean_iou": 0.25},
            {"step": 10, "eval/mix/accuracy": 0.5, "eval/mix/mean_iou": 0.75}]
    key = se.headline_key(rows, before=0.25, names={"accuracy", "mean_iou"})
    assert key == "eval/mix/mean_iou"
    assert se.rollouts_to_target(se.eval_curve(rows, key), 0.6, 64) == 640  # step 10 x 64
