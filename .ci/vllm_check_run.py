"""Check a 3-step `mmrlvr train ... rollout.engine=vllm` run: every RL step sampled, scored and updated.

Usage: python .ci/vllm_check_run.py RUN_DIR [--async] (exit 1 with one line per problem). With --async
(a rollout-server run with rollout.async_steps=1): step 1 sampled by the current weights, steps 2-3
one update behind (rollout/staleness 0, 1, 1), corrected by token_tis.
"""

import json
import math
import sys
from pathlib import Path

run = Path(sys.argv[1])
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
steps = {r["step"]: r for r in rows if "reward/mean" in r}
problems = []
if sorted(steps) != [1, 2, 3]:
    problems.append(f"{run}/metrics.jsonl: RL steps {sorted(steps)}, expected [1, 2, 3]")
for step, r in sorted(steps.items()):
    for key in ("reward/mean", "actor/grad_norm", "rollout/mean_length"):
        if not math.isfinite(r.get(key, float("nan"))):
            problems.append(f"{run}/metrics.jsonl: step {step}: {key} = {r.get(key)}")
if not any(r.get("actor/grad_norm", 0) > 0 for r in steps.values()):
    problems.append(f"{run}/metrics.jsonl: no step updated the policy (grad_norm 0 throughout): weight sync untested")
if "--async" in sys.argv[2:]:
    got = [steps[s].get("rollout/staleness") for s in sorted(steps)]
    if got != [0, 1, 1]:
        problems.append(f"{run}/metrics.jsonl: rollout/staleness {got}, expected [0, 1, 1] with rollout.async_steps=1")
    if not all("rollout_correction/kl_k1" in r for r in steps.values()):
        problems.append(f"{run}/metrics.jsonl: no rollout_correction/* drift statistics")
if not (run / "summary.json").is_file():
    problems.append(f"{run}: no summary.json")
print("\n".join(problems) or f"{run}: 3 RL steps with vLLM rollouts, rewards {[round(steps[s]['reward/mean'], 3) for s in sorted(steps)]}")
sys.exit(1 if problems else 0)
