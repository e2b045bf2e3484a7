"""Each prompt once per group, on and off, on vs_trl.py's shapes and warm starts.

    python benchmarks/speed/prompt_once.py [--repeats 6] [--shapes G8_tok32_px112,...]

Rollout: `HFRolloutEngine.rollout` of one batch with `rollout.shared_prefill` false (generate's own
prefill of G copies) and true, same prompts and seeds, alternating. Learner: forward + backward of
the completion log-probs of that batch with `prompt_once` false (one joined forward) and true.
Medians after one warm-up repeat; one torch thread. Warm starts are vs_trl.py's (built once
under --work).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path


sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.common import median_after_warmup  # noqa: E402
from benchmarks.speed.shape_ab import shape_ab_main  # noqa: E402
from benchmarks.speed.vs_trl import SHAPES  # noqa: E402
from benchmarks.speed.vs_trl_arms import _samples, load_bench_config, prompts  # noqa: E402

DEFAULT = "G4_tok32_px112,G8_tok32_px112,G16_tok32_px112,G8_tok32_px448,video8_G8_tok16,cot_G8_tok128_px112"


def measure(name: str, warm: Path, repeats: int) -> dict:
    from mmrlvr.data.collate import repeat_prompts
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.train.logprobs import completion_logprobs

    shape = {**SHAPES[name], "name": name}
    cfg = load_bench_config(shape, warm, repeats, Path("runs/bench_prompt_once") / name)
    model, processor = load_policy(dataclasses.replace(cfg.model, path=str(warm)))
    b, g = prompts(shape), shape["group"]
    samples = _samples(cfg, b * repeats)
    engine = HFRolloutEngine(model, processor)
    roll: dict = {False: [], True: []}
    for i in range(repeats):
        for on in (False, True):
            t0 = time.perf_counter()
            engine.rollout(samples[i * b:(i + 1) * b], g, dataclasses.replace(cfg.rollout, shared_prefill=on), seed=i)
            roll[on].append(time.perf_counter() - t0)
    out = engine.rollout(samples[:b], g, cfg.rollout, seed=0)
    inputs, ids, mask = repeat_prompts(out.prompt_inputs, g), out.completion_ids, out.completion_mask
    model.train()
    learn: dict = {False: [], True: []}
    for _ in range(repeats):
        for on in (False, True):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            lp, _ = completion_logprobs(model, inputs, ids, mask, temperature=cfg.rollout.temperature,
                                        suppress_ids=engine.suppress_ids, prompt_once=on)
            (lp * mask).sum().backward()
            learn[on].append(time.perf_counter() - t0)
    r_off, r_on = median_after_warmup(roll[False]), median_after_warmup(roll[True])
    l_off, l_on = median_after_warmup(learn[False]), median_after_warmup(learn[True])
    return {"rollout_s": {"off": r_off, "on": r_on}, "rollout_speedup": r_off / r_on,
            "learner_s": {"off": l_off, "on": l_on}, "learner_speedup": l_off / l_on, "rows": b * g,
            "mean_length": float(mask.sum(1).float().mean())}


def main() -> int:
    return shape_ab_main(
        DEFAULT, "benchmarks/results/prompt_once.json",
        "| shape | rollout off s | on s | speed-up | learner fwd+bwd off s | on s | speed-up |", measure,
        lambda name, r: (f"| {name} | {r['rollout_s']['off']:.3f} | {r['rollout_s']['on']:.3f} | {r['rollout_speedup']:.2f}x "
                         f"| {r['learner_s']['off']:.3f} | {r['learner_s']['on']:.3f} | {r['learner_speedup']:.2f}x |"))


if __name__ == "__main__":
    sys.exit(main())
