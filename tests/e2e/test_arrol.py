"""arrol through the whole loop (configs/arrol_tiny.yaml, shrunk): its metrics are logged, the
quality head lives in each checkpoint's run state, and a stopped run resumes it exactly."""

import json
from pathlib import Path

from mmrlvr.config import load_config
from mmrlvr.recipe.eval_cli import run_eval
from mmrlvr.recipe.loop import train
from mmrlvr.checks.validate import config_errors

ROOT = Path(__file__).resolve().parents[2]
A = "sample_efficiency.arrol"
SMALL = [
    "task.train_size=32", "task.eval_size=4", "warm_start.steps=2", "warm_start.batch_size=4",
    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8", "eval.batch_size=4",
    "train.steps=3", "train.save_every=1", "train.log_every=1", "train.lr=1e-3", "verifier_workers=0",
    f"{A}.prefix_tokens=3", f"{A}.min_labels=2", f"{A}.min_auroc=0.0",  # trusted once both classes were seen
    f"rewards=[{{verifier: {ROOT / 'tests/e2e/user_verifier.py'}:even_length}}]",  # mixed groups
]
KEYS = ("arrol/head_auroc", "arrol/survivor_pos_share", "arrol/tokens_saved", "arrol/tokens_generated",
        "arrol/all_equal_groups", "arrol/head_trusted", "arrol/head_loss", "arrol/pruned_frac", "arrol/head_auroc_within")


def _run(run: Path, *extra: str) -> dict:
    train(load_config(ROOT / "configs/arrol_tiny.yaml", [*SMALL, f"output_dir={run}", *extra]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in rows if "reward/mean" in r}


def _state(run: Path, step: int) -> dict:
    return json.loads((run / "checkpoints" / f"step_{step}" / "state.json").read_text())


def test_the_tiny_config_is_valid_and_enables_arrol():
    cfg = load_config(ROOT / "configs/arrol_tiny.yaml")
    assert config_errors(cfg) == [] and cfg.sample_efficiency.arrol.enabled


def test_arrol_run_logs_its_metrics_and_resumes_its_head_exactly(tmp_path):
    straight = _run(tmp_path / "straight")
    for s in straight.values():
        assert set(KEYS) <= s.keys()
        assert s["arrol/pruned_frac"] == 0.5  # 2 x 4 rows generated, 2 x 2 kept
    head = _state(tmp_path / "straight", 3)["arrol"]["head"]
    assert head["fits"] == 3 and len(head["seen"]) == 3 * 2 * 2  # one round a step, 4 survivors each
    assert any(s["arrol/head_trusted"] == 1.0 for s in straight.values())  # the trusted path ran
    _run(tmp_path / "resumed", "train.steps=2")
    resumed = _run(tmp_path / "resumed", "train.resume=true")  # continues at step 3
    assert sorted(resumed) == [1, 2, 3]
    for key in (*KEYS, "reward/mean", "loss/policy", "arrol/head_auroc_window"):
        assert resumed[3][key] == straight[3][key] or (resumed[3][key] != resumed[3][key]
                                                       and straight[3][key] != straight[3][key]), key
    assert _state(tmp_path / "resumed", 3)["arrol"] == _state(tmp_path / "straight", 3)["arrol"]
    # `mmrlvr eval --samples 2` weighs the candidates with the head saved in the checkpoint
    cfg = load_config(ROOT / "configs/arrol_tiny.yaml", [*SMALL, f"{A}.eval_weighting=head"])
    report = run_eval(cfg, str(tmp_path / "straight" / "checkpoints" / "step_3"), samples=2)
    assert 0 <= report["head_best@2"] <= 1 and 0 <= report["head_vote@2"] <= 1 and "pass@2" in report
