"""`verifier/failed_frac` in metrics.jsonl: the share of a step's verdicts where the verifier
itself failed, seen through a tiny real run with a plug-in verifier that breaks on odd lengths."""

import json
from pathlib import Path

from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["task.train_size=8", "task.eval_size=4", "warm_start.steps=0", "rollout.prompts_per_step=2",
         "rollout.group_size=4", "rollout.max_new_tokens=7", "train.steps=3", "train.save_every=3",
         "train.log_every=1", "eval.batch_size=8", "verifier_workers=0",
         "verifier_stop_share=null",  # these plug-ins fail on purpose, often: the metric is under test, not the stop
         f"rewards=[{{verifier: {ROOT / 'tests/e2e/user_verifier.py'}:breaks_on_odd_length}}]"]


def test_failed_frac_is_logged_each_step_and_counts_the_broken_verdicts(tmp_path):
    run = tmp_path / "run"
    train(load_config(ROOT / "configs/quickstart.yaml", [*SMALL, f"output_dir={run}"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = {r["step"]: r for r in rows if "reward/mean" in r}
    assert sorted(steps) == [1, 2, 3]
    seen = []
    for step, m in steps.items():
        # 2 prompts x 4 completions = 8, all written to samples/ (log_every=1): the share of odd
        # lengths is the share of failed verdicts (an odd one raises, an even one scores 1)
        done = [json.loads(x) for x in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        assert len(done) == 8
        odd = sum(len(d["completion"]) % 2 for d in done)
        assert sum(d["reason"].startswith("verifier failed:") for d in done) == odd
        assert m["verifier/failed_frac"] == odd / 8
        assert m["reward/mean"] == 1 - odd / 8  # failures score 0, never a clipped 1.0
        seen.append(odd)
    assert 0 < sum(seen) < 24, seen  # some failures, not all: a swap with 1 - frac would show


def test_failed_frac_counts_the_groups_dynamic_sampling_drops(tmp_path):
    """A prompt whose every verdict failed scores a flat group, which dynamic sampling drops: the
    trained batch then holds no failure, yet the step's verifier failed. The metric must say so."""
    run = tmp_path / "run"
    plugin = f"rewards=[{{verifier: {ROOT / 'tests/e2e/user_verifier.py'}:breaks_on_even_ids}}]"
    train(load_config(ROOT / "configs/quickstart.yaml",
                      [*SMALL[:-1], plugin, "algo.dynamic_sampling=true", "algo.max_rounds=2", f"output_dir={run}",
                       "rollout.sampler=multinomial"]))  # draws that hold such a step (below)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = {r["step"]: r for r in rows if "reward/mean" in r}
    quiet = []  # steps whose trained batch holds no failure
    for step, m in steps.items():
        kept = [json.loads(x) for x in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        if not any(d["reason"].startswith("verifier failed:") for d in kept):
            quiet.append(m)
    # such a step (2 prompts x 4, max_rounds=2): round 1 scores 8 verdicts, the even-id prompt's 4
    # fail and its flat group is dropped; round 2 scores 1 prompt x 4 more: 4 of 12 failed = 1/3
    assert any(m["verifier/failed_frac"] == 4 / 12 and m["rollout/rounds"] == 2 and m["rollout/dropped_groups"] == 1
               for m in quiet), steps
