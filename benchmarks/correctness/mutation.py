"""Hand-written mutants of the RL math and step: how many does the fast test suite kill?

Each mutant is one plausible bug (a flipped sign, a dropped mask, a skipped step) written as a
text replacement in the package (`MUTANTS`: the RL math and step; `NEW_MUTANTS`: token
weighting, temporal contrast, the trim path, verifiers, data, checkpoints). The script copies the
checkout to a temporary directory, checks that the chosen tests pass there unmutated, then for
each mutant applies it, runs the tests that guard that file (`pytest -x`: the first failure
kills it) and restores the file. Not run in CI.

    python benchmarks/correctness/mutation.py            # all mutants
    python benchmarks/correctness/mutation.py -k rloo    # those whose name contains "rloo"
    python benchmarks/correctness/mutation.py --new      # NEW_MUTANTS only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ALGOS = ["tests/algos"]
STEP = ["tests/train/test_update.py", "tests/train/test_presets.py", "tests/train/test_logprobs.py",
        "tests/train/test_masks.py"]
ADV, LOSS, SAMP, PRE = ("mmrlvr/algos/advantages.py", "mmrlvr/algos/losses.py", "mmrlvr/algos/sampling.py",
                        "mmrlvr/algos/presets.py")
RES = "mmrlvr/checks/resolve.py"
STEPPY, LEARN, LP = "mmrlvr/recipe/step.py", "mmrlvr/train/learner.py", "mmrlvr/train/logprobs.py"
TW, TEMP, SIG, ROLES = ("mmrlvr/algos/token_weights.py", "mmrlvr/methods/temporal_contrast/maths.py",
                        "mmrlvr/methods/token_weighting/signals.py", "mmrlvr/methods/token_weighting/weigher.py")
VER = ["tests/verifiers/test_edge_cases.py", "tests/verifiers/test_verifiers.py", "tests/verifiers/test_properties.py"]
TWT = ["tests/methods/token_weighting/test_weigher.py"]
TCT = ["tests/methods/temporal_contrast/test_temporal.py"]  # temporal contrast's maths
SF = ["tests/train/test_shared_forward.py"]

# (name, file, original text, mutated text, tests)
MUTANTS = [
    ("grpo: no std division", ADV, "adv = (rewards - group_mean(rewards)) / (group_std(rewards) + eps)",
     "adv = rewards - group_mean(rewards)", ALGOS),
    ("group std biased", ADV, "(sq / (n - 1).clamp(min=1)).sqrt()", "(sq / n.clamp(min=1)).sqrt()", ALGOS),
    ("flat groups not zeroed", ADV, "| (hi == lo)", "| (hi < lo)", ALGOS),
    ("rloo: mean over all, not the others", ADV, "others = (r.sum(dim=1, keepdim=True) - r) / (n - 1).clamp(min=1)",
     "others = (r.sum(dim=1, keepdim=True) - r) / n.clamp(min=1)", ALGOS),
    ("NaN completions keep an advantage", ADV, "torch.isnan(rewards) | flat_groups(rewards)", "flat_groups(rewards)", ALGOS),
    ("reinforce_pp: no whitening std", ADV, "adv = (centred - vals.mean()) / (vals.std() + eps)",
     "adv = centred - vals.mean()", ALGOS),
    ("token-mean over padding too", LOSS, "denom = mask.sum().clamp(min=1) if denominator is None else denominator",
     "denom = mask.numel() if denominator is None else denominator", ALGOS),
    ("seq-mean-token-mean divides by T", LOSS, "per_seq = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)",
     "per_seq = masked.sum(dim=1) / mask.shape[1]", ALGOS),
    ("PPO: min instead of max", LOSS, "per_token = torch.maximum(unclipped, clipped)",
     "per_token = torch.minimum(unclipped, clipped)", ALGOS),
    ("clip-higher ignored", LOSS, "ratio.clamp(1.0 - clip_low, 1.0 + clip_high)",
     "ratio.clamp(1.0 - clip_low, 1.0 + clip_low)", ALGOS),
    ("GSPO uses token ratios", LOSS, "return clipped_surrogate(seq.detach() + logprobs - logprobs.detach(), logprobs,",
     "return clipped_surrogate(log_ratio, logprobs,", ALGOS),
    ("k3 sign", LOSS, "(torch.exp(neg) - neg - 1.0)", "(torch.exp(neg) + neg - 1.0)", ALGOS),
    ("k2 without the 1/2", LOSS, "return 0.5 * diff.pow(2)", "return diff.pow(2)", ALGOS),
    ("clip_frac_high uses clip_low", LOSS, "high = ((r > 1.0 + clip_high)", "high = ((r > 1.0 + clip_low)", ALGOS),
    ("truncation mask inverted", SAMP, "(~truncated.bool()).unsqueeze(1)", "truncated.bool().unsqueeze(1)", ALGOS),
    ("overlong penalty uncapped", SAMP, "(over / buffer).clamp(max=1.0)", "(over / buffer)", ALGOS),
    ("one scorable reward is informative", ADV, "(valid.sum(dim=1, keepdim=True) < 2)", "(valid.sum(dim=1, keepdim=True) < 1)", ALGOS),
    ("dapo: one mini-batch", PRE, "mini_batches=16),", "mini_batches=1),", ALGOS + ["tests/train/test_presets.py"]),
    ("gspo: one mini-batch", PRE, "mini_batches=4),", "mini_batches=1),", ALGOS + ["tests/train/test_presets.py"]),
    ("k1 allowed in the loss", RES, "if coef > 0 and kind not in LOSS_KL_KINDS:", "if False:", ALGOS),
    ("KL rows skipped with zero advantage", LEARN, "if (tg.ref is None and not algo.entropy_coef)",
     "if (not algo.entropy_coef)", STEP),
    ("old log-probs ignored", LEARN, "old_lp = lp.detach() if tg.old is None else tg.old[rows].to(lp.device)",
     "old_lp = lp.detach()", STEP),
    ("no-grad forwards not micro-batched", LEARN, "max(1, -(-n // max(1, algo.mini_batches * algo.grad_accum)))",
     "n", STEP),
    ("denominator counts padding", LEARN, '        return mask.sum().clamp(min=1)\n    return (mask.sum(1) > 0)',
     '        return mask.numel()\n    return (mask.sum(1) > 0)', STEP),
    ("last completion token dropped", LEARN, "t = max(1, int(mask.sum(1).max()))",
     "t = max(1, int(mask.sum(1).max()) - 1)", STEP),
    ("learner ignores temperature", LEARN, "temperature=opts.temperature, suppress_ids=list(opts.suppress_ids), with_entropy=with_entropy",
     "temperature=1.0, suppress_ids=list(opts.suppress_ids), with_entropy=with_entropy", STEP),
    ("KL added with the wrong sign", LEARN, "loss = loss + algo.kl_coef * kl", "loss = loss - algo.kl_coef * kl", STEP),
    ("mask_truncated ignored", LEARN, "if algo.mask_truncated else mask", "if False else mask", STEP),
    ("reference is the policy", LEARN, "return batch_logprobs(self.ref_model, batch, self.read, micro)",
     "return batch_logprobs(self.model, batch, self.read, micro)", STEP),
    ("zero-advantage skip drops the denominator", LEARN, "denom = _denominator(tg.mask[mb], algo.aggregation)",
     "denom = _denominator(tg.mask[mb[needed[mb]]], algo.aggregation)", STEP),
    ("entropy bonus sign", LEARN, "loss = loss - algo.entropy_coef * aggregate(ent,", "loss = loss + algo.entropy_coef * aggregate(ent,", STEP),
    ("log-prob normaliser sign", LP, "x.gather(-1, tgt).squeeze(-1) - lse", "x.gather(-1, tgt).squeeze(-1) + lse",
     ["tests/train/test_logprobs.py"]),
    ("suppressed ids not applied", LP, "if suppress is not None:\n        x = x.index_fill", "if False:\n        x = x.index_fill",
     ["tests/train/test_logprobs.py", "tests/rollout/test_hf.py"]),
]

# plausible bugs the suite once missed (each has a test seen to fail with it)
NEW_MUTANTS = [
    ("trim: log-probs padded back on the left", LEARN, "lp = F.pad(lp, (0, t_all - t))", "lp = F.pad(lp, (t_all - t, 0))", STEP),
    ("trim: entropies padded back on the left", LEARN, "ent = F.pad(ent, (0, t_all - t)) if",
     "ent = F.pad(ent, (t_all - t, 0)) if", STEP),
    ("overlong penalty with the wrong sign", STEPPY, "rewards = rewards + shaped.view_as(rewards)",
     "rewards = rewards - shaped.view_as(rewards)", STEP),
    ("corrupted forward at temperature 1", SIG,
     "lp_c = logits_to_logprobs(logits, ids.to(logits.device), temperature, suppress_ids)[0]",
     "lp_c = logits_to_logprobs(logits, ids.to(logits.device), 1.0, suppress_ids)[0]", ["tests/methods/token_weighting/test_signals.py"]),
    ("corruption seed not per step", ROLES, "seed=cfg.seed * 1_000_003 + step,", "seed=cfg.seed * 1_000_003,", TWT),
    ("token signals at temperature 1", ROLES, "temperature=cfg.rollout.temperature, suppress_ids=suppress, corrupt_prob",
     "temperature=1.0, suppress_ids=suppress, corrupt_prob", TWT),
    ("pepo progress one step behind in the weigher", ROLES, "self.suppress, step=step, fill=self.fill,",
     "self.suppress, step=step - 1, fill=self.fill,", TWT),
    ("pepo progress fixed at 1", ROLES, "progress=step / max(cfg.train.steps, 1)", "progress=1.0", TWT),
    ("tor: perception and reasoning coefficients swapped", TW,
     "coef = torch.tensor([tor_other, tor_perception, tor_reasoning, tor_both, 0.0]",
     "coef = torch.tensor([tor_other, tor_reasoning, tor_perception, tor_both, 0.0]", ALGOS),
    ("vppo keeps every tie of the k-th score", TW, "topk_mask(dep, mask, vppo_top_frac, per_row=True, exact=True)",
     "topk_mask(dep, mask, vppo_top_frac, per_row=True)", ALGOS),
    ("perception labels keep every tie", TW, "p = topk_mask(dependency, mask, perception_frac, exact=True).bool()",
     "p = topk_mask(dependency, mask, perception_frac).bool()", ALGOS),
    ("reasoning labels keep every tie", TW, "r = topk_mask(entropy, mask, reasoning_frac, exact=True).bool()",
     "r = topk_mask(entropy, mask, reasoning_frac).bool()", ALGOS),
    ("pepo released: softmax over the normalised similarity", TW, 'x = raw if pepo_variant == "released" else s',
     "x = s", ALGOS),
    ("pepo released: no embeddings in the similarity", SIG,
     "handles.append(all_layers[0].register_forward_pre_hook(embed_hook, with_kwargs=True))", "pass",
     ["tests/methods/token_weighting/test_signals.py"]),
    ("pepo released reads the minmax similarity", ROLES, 'return {"similarity_layers": None, "similarity_at_token": True}',
     'return {"similarity_layers": tw.similarity_layers, "similarity_at_token": False}', TWT),
    ("t-grpo pays at p = mu p~", TEMP, "gate = (p > mu * p_shuf).float()", "gate = (p >= mu * p_shuf).float()", TCT),
    ("t-grpo: a score equal to the threshold is correct", TEMP, "nan=-math.inf) > threshold", "nan=-math.inf) >= threshold",
     TCT),
    ("temporal contrast ignores correct_threshold", "mmrlvr/methods/temporal_contrast/bonus.py", "tc.alpha, tc.mu, tc.correct_threshold)",
     "tc.alpha, tc.mu)", ["tests/methods/temporal_contrast/test_bonus.py"]),
    ("lower clip bound from clip_high", LOSS, "clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)",
     "clipped = -adv * ratio.clamp(1.0 - clip_high, 1.0 + clip_high)", ALGOS),
    ("giou divides the empty area by the union", "mmrlvr/verifiers/geometry.py",
     "    return (inter / union if union > 0 else 0.0) - (enclose - union) / enclose",
     "    return (inter / union if union > 0 else 0.0) - (enclose - union) / union", VER),
    ("giou metric scored as iou", "mmrlvr/verifiers/grounding.py", "score = (giou(pred, ref) + 1.0) / 2.0",
     "score = value", VER),
    ("boxed inside <answer> ignored", "mmrlvr/verifiers/extract.py", "        return _one(boxes) if boxes else inner",
     "        return inner", VER),
    ("order labels case-sensitive", "mmrlvr/verifiers/temporal.py", "    pred = [known.get(p.casefold(), p) for p in pred]",
     "    pass", VER),
    ("degenerate boxes left out of precision", "mmrlvr/verifiers/grounding.py",
     "precision, recall = tp / len(mapped), tp / len(refs)", "precision, recall = tp / len(usable), tp / len(refs)", VER),
    ("letters beyond the options accepted", "mmrlvr/verifiers/answer.py",
     "    valid = letters[: len(options)] if options else letters", "    valid = letters", VER),
    ("candidate columns taken in dataset order", "mmrlvr/data/io.py",
     "        found = next((c for c in _candidates(want) if c in names), None)",
     "        found = next((c for c in names if c in _candidates(want)), None)", ["tests/data/test_io.py"]),
    ("checkpoints sorted by name", "mmrlvr/train/checkpoint.py", "    return [p for _, p in sorted(found)]",
     "    return [p for p in sorted(p for _, p in found)]", ["tests/e2e/test_run_faults.py"]),
    ("a shuffle may come out in order", "mmrlvr/data/video.py", "        if n < 2 or perm != list(range(n)):",
     "        if True:", ["tests/data/test_video.py"]),
    ("shared forward: weighted rows read in the wrong order", LEARN,
     "idx = [at[r] for r in tg.pending.rows]", "idx = [at[r] for r in reversed(tg.pending.rows)]", SF),
    ("shared forward: weights computed but not applied", LEARN,
     "adv = adv * weights[rows].to(adv.dtype)", "adv = adv * 1.0", SF),
    ("shared forward: entropy taken as the clean log-probs", SIG,
     'out["logprobs"].append(clean["logprobs"][rows]', 'out["logprobs"].append(clean["entropy"][rows]', SF),
]


def copy_checkout(root: Path) -> Path:
    files = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"], capture_output=True,
                           text=True, check=True).stdout.split()
    dst = Path(tempfile.mkdtemp(prefix="mutants-")) / "repo"
    for rel in files:
        if (root / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dst / rel)
    shutil.copytree(dst / "tasks", dst / "mmrlvr" / "tasks")  # what the package_dir install maps
    return dst


def run_tests(repo: Path, tests: list[str]) -> tuple[bool, float]:
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow and not gpu", "-p",
                           "no:cacheprovider", *tests], cwd=repo, env=env, capture_output=True, text=True)
    return proc.returncode == 0, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", default="", help="only mutants whose name contains this (several: a|b|c)")
    parser.add_argument("--new", action="store_true", help="only NEW_MUTANTS")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    repo = copy_checkout(root)
    pool = NEW_MUTANTS if args.new else MUTANTS + NEW_MUTANTS
    chosen = [m for m in pool if any(k in m[0] for k in args.k.split("|"))]
    all_tests = sorted({t for m in chosen for t in m[4]})
    ok, secs = run_tests(repo, all_tests)
    if not ok:
        sys.exit(f"the tests fail on the unmutated copy in {repo}; fix that first")
    rows = []
    for name, rel, old, new, tests in chosen:
        path = repo / rel
        text = path.read_text()
        if text.count(old) != 1:
            sys.exit(f"mutant {name!r}: {old!r} occurs {text.count(old)} times in {rel}")
        path.write_text(text.replace(old, new))
        try:
            passed, secs = run_tests(repo, tests)
        finally:
            path.write_text(text)
        rows.append({"mutant": name, "file": rel, "killed": not passed, "seconds": round(secs, 1)})
        print(f"{'killed ' if not passed else 'SURVIVED'}  {rel:28s} {name}", flush=True)
    killed = sum(r["killed"] for r in rows)
    print(f"\nkilled {killed} of {len(rows)} mutants ({100 * killed / max(len(rows), 1):.0f}%)")
    shutil.rmtree(repo.parent, ignore_errors=True)
    if not args.k:
        out = root / "benchmarks" / "results" / ("mutation_new.json" if args.new else "mutation.json")
        out.write_text(json.dumps({"killed": killed, "total": len(rows), "mutants": rows}, indent=1))


if __name__ == "__main__":
    main()
