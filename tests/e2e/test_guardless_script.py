"""`mmrlvr.run` called at the top level of a script, without `if __name__ == "__main__":` (as a
first script is written): the verifier workers must not re-run the script, and the reward scores."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = '''
import sys
import mmrlvr

def shorter(completion, sample):
    return 1.0 if len(completion) < 6 else 0.0

print("SCRIPT RAN", flush=True)
mmrlvr.run("configs/quickstart.yaml", rewards=[shorter], overrides=[
    "task.train_size=8", "task.eval_size=4", "warm_start.steps=0", "rollout.prompts_per_step=2",
    "rollout.group_size=4", "rollout.max_new_tokens=7", "train.steps=2", "train.save_every=2",
    "eval.batch_size=8", "verifier_workers=2", f"output_dir={sys.argv[1]}"])
'''


def test_a_script_without_a_main_guard_runs_once_and_its_reward_scores(tmp_path):
    script = tmp_path / "train_me.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("SCRIPT RAN") == 1, out.stdout[-2000:]  # the two workers did not re-run it
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2 and all(r["verifier/failed_frac/shorter"] == 0.0 for r in steps)
    assert "RunDirError" not in out.stderr
