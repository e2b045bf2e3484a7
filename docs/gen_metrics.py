"""The metrics the training loop logs: names read from the code, meanings written beside them.

`code_metric_names()` walks the modules that produce metrics (recipe, methods, train, algos, data, rollout,
verifiers) and collects every string or f-string shaped like `family/name` (an f-string's `{x}`
becomes `<x>`). `METRICS` says what each name means. `tests/docs/test_metrics_reference.py` fails
when the code logs a name `METRICS` does not cover, when `METRICS` lists a name the code no longer
has, and when a real tiny run logs a key that no documented name matches.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCERS = ("mmrlvr/recipe", "mmrlvr/methods", "mmrlvr/train", "mmrlvr/algos", "mmrlvr/data", "mmrlvr/rollout", "mmrlvr/verifiers")
# prefixes of internal keys that are never logged: the all-reduce of the learner's statistics
INTERNAL = ("s/", "w/")
SHAPE = re.compile(r"[a-z_]+/[A-Za-z0-9_<>*]*(/[A-Za-z0-9_<>*]+)*")

# (name or pattern, what it is). `<x>` stands for one path segment; the families come in the order
# a person reads a step: reward, rollout, update, time, then the optional features.
METRICS: list[tuple[str, str]] = [
    ("reward/mean", "mean total reward (the weighted sum of the reward terms) over the step's scored completions"),
    ("reward/<name>", "mean score of one reward term (its verifier's name), before weighting"),
    ("reward/<name>/<k>", "mean of one part of a term's verdicts (`Verdict.parts`, e.g. `reward/iou/iou`)"),
    ("reward/<role>/mean", "episodes (`rollout.episode` other than single): mean reward of the episodes in which a role (`policy`, `solver`, `refiner`, `reasoner`, `hinter`, ...) took a turn; prco: `reward/observer/mean` is the Observer's reward (gated utility), `reward/solver/mean` the Solver answers' reward, to captions that did not leak"),
    ("reward/observer/leak_frac", "prco: share of the step's Observer captions the leak gate caught (`rollout.episode_args.leak_gate`); their reward is `leak_reward` and their Solver answers are not trained"),
    ("reward/observer/utility", "prco: mean utility of the captions before the leak gate (each caption's Solver answers' mean reward)"),
    ("reward/observer/as_answer/<name>", "prco: mean score of one reward term on the captions read as answers (what the leak gate's verifier check reads)"),
    ("reward/observer/as_answer/<name>/<k>", "prco: one part of those verdicts"),
    ("reward/solver/<name>", "prco: mean score of one reward term on the Solver's answers (every caption's, leaked ones included)"),
    ("reward/solver/<name>/<k>", "prco: one part of the Solver's verdicts"),
    ("reward/reasoner/mean", "hill: mean reward of the round's own answers, before hints (what GRPO's reward/mean is)"),
    ("reward/hinter/mean", "hill: mean hint reward over every hint of the step (-0.2 for a gate failure; 0 when no hint passed)"),
    ("hill/hard_frac", "hill: share of the round's groups with no correct answer (every reward <= 0.5): the prompts hinted"),
    ("hill/generated", "hill: sequences generated this step: answers, hints and hinted re-rollouts (GRPO: prompts x group size)"),
    ("hill/gate_pass_frac", "hill: share of hints that passed every gate (and were re-rolled)"),
    ("hill/parse_fail_frac", "hill: share of hints without a non-empty <hint> block (with `hint_tags`)"),
    ("hill/leak_frac", "hill: share of hints the leak gate refused (they contain the gold answer)"),
    ("hill/overlong_frac", "hill: share of hints whose hinted prompt passes `max_hinted_prompt_tokens`"),
    ("hill/hinted_pass_rate", "hill: mean share of correct re-rollouts per passing hint"),
    ("hill/replaced_frac", "hill: share of the round's groups replaced by a hint's re-rollouts (mixed hinted groups)"),
    ("hill/reliance_mean", "hill: mean hint reliance (mean log-prob without the hint minus with it, correct re-rollouts) of the chosen hints"),
    ("episode/turns_mean", "episodes: mean number of policy turns per episode"),
    ("episode/inserted_images_mean", "episodes: mean number of images the turn function inserted per episode (tool results)"),
    ("episode/ended_by_error_frac", "episodes: share of episodes ended because the turn function raised or took longer than `rollout.turn_timeout_s` (the run goes on)"),
    ("episode/ended_by/<reason>", "episodes: share of episodes ended for each reason: `answered` (the turn function ended it), `max_turns`, `token_limit`, `image_limit`, `error`, `timeout`"),
    ("rollout/mixed_group_frac", "share of groups whose rewards are not all equal: only these carry a GRPO signal"),
    ("rollout/dropped_groups", "groups dynamic sampling dropped this step (all rewards equal)"),
    ("rollout/rounds", "sampling rounds it took to fill the batch (more than 1 only with dynamic sampling)"),
    ("rollout/tokens_per_s", "sampled completion tokens per second of generation"),
    ("rollout/mean_length", "mean completion length in tokens"),
    ("rollout/max_length", "longest completion of the step in tokens: how many decoding steps the sampler ran"),
    ("rollout/truncated_frac", "share of completions cut at `rollout.max_new_tokens`"),
    ("rollout/staleness", "rollout.engine=vllm_server only: weight updates between the policy that sampled the batch and the "
     "learner's at the update (0 synchronously; 1 from step 2 on with `rollout.async_steps: 1`)"),
    ("verifier/failed_frac", "share of the step's verdicts of the first reward term where the verifier itself failed (raised, hung, returned no usable score), over every sampling round"),
    ("verifier/failed_frac/<name>", "the same for each reward term (its verifier's name), over the step's first sampling round: a second term's failures show here"),
    ("loss/policy", "the policy-gradient loss of the update, averaged over optimizer steps"),
    ("loss/kl", "the KL penalty term (0 without `algo.kl_coef`)"),
    ("actor/<k>", "per-token means of the loss's statistics, one key each (listed below)"),
    ("actor/clip_frac", "share of tokens whose ratio was clipped (low + high)"),
    ("actor/clip_frac_low", "share of tokens clipped below 1 - `algo.clip_low` (negative advantage)"),
    ("actor/clip_frac_high", "share of tokens clipped above 1 + `algo.clip_high` (positive advantage)"),
    ("actor/clip_frac_dual", "share of negative-advantage tokens whose loss dual clip bounds at -A x `algo.dual_clip` (ratio above it)"),
    ("actor/approx_kl", "k3 estimate of KL(old policy, new policy) over the update"),
    ("actor/ratio_mean", "mean importance ratio new / old"),
    ("actor/entropy", "mean token entropy of the policy on the sampled completions"),
    ("actor/grad_norm", "gradient norm before clipping, averaged over the optimizer steps taken"),
    ("actor/nonfinite_skipped", "optimizer steps skipped this step because the loss or gradient was not finite (train.max_nonfinite_steps)"),
    ("actor/lr", "the learning rate this step used (after warm-up and schedule)"),
    ("actor/updated_seqs_frac", "share of sequences that took part in an update (after filtering)"),
    ("train/micro_batches", "backward passes of the update this step (all epochs and mini-batches): `algo.grad_accum` per mini-batch, or as many as `train.micro_batch_tokens` needs; under several processes the most any rank needs, the others padded with zero-weight passes"),
    ("train/padding_waste", "tokens the update's forwards computed / tokens that were no padding, over the global batch (1.0: no padding); counted as the forward pays: each prompt once per micro-batch under `train.prompt_once`, completions padded to the micro-batch's longest, zero-weight passes included; with `train.padding_free` real tokens only, so 1.0; logged every step: 1.0 when the update ran no forward (every group's advantage 0)"),
    ("rollout_correction/<k>", "sampler-vs-learner drift when `algo.rollout_correction` is on: `kl_k1`, `kl_k3`, `weight_mean`, `capped_frac`"),
    ("rollout_correction/ppl_<who>", "perplexity of the sampled tokens under the learner and under the sampler"),
    ("time/step", "seconds of the whole step"),
    ("time/rollout", "seconds sampling completions (with `rollout.async_steps: 1`: the first round's own generation, which overlapped the previous update)"),
    ("time/score", "seconds scoring them with the verifiers"),
    ("time/update", "seconds of the policy update"),
    ("time/token_signals", "seconds computing per-token signals (token weighting)"),
    ("data/bad_media", "samples dropped this step because their image or video failed to decode"),
    ("eval/<task>/<name>", "held-out evaluation (step 0: before RL; the last step: after): `accuracy`, `reward`, the mean score of each reward term and the headline metric of each verifier"),
    ("eval/<task>/<name>/<k>", "held-out mean of one part of a term's verdicts (`eval/counting/count/format`)"),
    ("tokens/weight_mean", "mean token weight (token weighting)"),
    ("tokens/visual_dependency", "mean visual dependency of the tokens (how much the image changes each token's log-probability)"),
    ("tokens/dependent_frac", "share of tokens whose visual dependency exceeds the threshold"),
    ("tokens/<name>_frac", "share of tokens labelled `perception`, `reasoning`, `both` or `other`"),
    ("tokens/weight_<name>", "mean weight of the tokens with that label"),
    ("tokens/steps_per_response", "kawhi: mean number of reasoning steps a weighted response splits into (`token_weighting.kawhi_split`)"),
    ("tokens/weight_sd", "kawhi: spread (sd) of the token weights: how far credit moved between steps (0: none)"),
    ("tokens/region_attention", "kawhi: mean attention mass a token's state puts on the salient image region through the vision heads"),
    ("temporal/ordered_acc", "accuracy of the group on frames in order (temporal contrast)"),
    ("temporal/shuffled_acc", "accuracy of the same prompts on shuffled frames"),
    ("temporal/bonus_frac", "share of completions that received the temporal bonus"),
    ("temporal/bonus_mean", "mean temporal bonus"),
    ("replay/frac", "share of this step's prompts that are replays (prompt replay)"),
    ("replay/queue", "prompts waiting in the replay queue"),
    ("replay/mean_reuse", "mean reuse count of this step's replays (0 when none)"),
    ("dbb/prompts", "prompts with a posterior (DBB advantages)"),
    ("dbb/mean_p", "their mean posterior pass rate"),
    ("demos/frac", "share of completions that are demonstrations"),
    ("arrol/head_auroc", "arrol (`sample_efficiency.arrol`): AUROC of the quality head's prefix scores for the step's first round's survivors against their outcomes, scored before the head learned from them (at the one prefix, `prefix_tokens`; NaN when the survivors are all right or all wrong)"),
    ("arrol/head_auroc_within", "arrol: the mean AUROC inside each group of survivors that holds both outcomes: how well the head ranks a prompt's own rows, which is all the selection uses (the pooled `arrol/head_auroc` also credits telling easy prompts from hard ones)"),
    ("arrol/head_auroc_window", "arrol: the same AUROC over the newest `auroc_window` out-of-sample survivors: what decides whether the head selects"),
    ("arrol/head_trusted", "arrol: 1 when the head chose the survivors, 0 when the fallback did (its first group_size rows per prompt)"),
    ("arrol/head_loss", "arrol: the quality head's binary cross-entropy at its last AdamW step on the survivors"),
    ("arrol/survivor_pos_share", "arrol: share of survivors labelled positive (verifier reward / largest reward >= `positive_at`); the target is `target_pos_share`"),
    ("arrol/all_equal_groups", "arrol: share of groups whose survivors' rewards are all equal (no GRPO signal)"),
    ("arrol/tokens_generated", "arrol: tokens sampled: every over-generated row's prefix plus the survivors' continuations"),
    ("arrol/tokens_saved", "arrol: estimated tokens pruning saved: pruned rows still generating at the prefix x the mean continuation of the survivors that were"),
    ("arrol/tokens_saved_max", "arrol: the most pruning could have saved: pruned rows still generating at the prefix x (max_new_tokens - prefix_tokens)"),
    ("arrol/pruned_frac", "arrol: share of the generated rows dropped at the prefix"),
]


def _as_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else f"<{ast.unparse(v.value)}>" for v in node.values)
    return None


def code_metric_names(root: Path = ROOT) -> dict[str, list[str]]:
    """name (f-string fields as `<x>`) -> files that write it, for every `family/name` string in the
    producing modules; bare prefixes (`"time/"`, used in `startswith`) and internal keys are left out."""
    found: dict[str, set[str]] = {}
    for folder in PRODUCERS:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                s = _as_text(node)
                if s is None or not SHAPE.fullmatch(s) or s.endswith(("/", "_")) or s.startswith(INTERNAL):
                    continue
                found.setdefault(s, set()).add(str(path.relative_to(root)))
    return {k: sorted(v) for k, v in sorted(found.items())}


def _pattern(name: str) -> str:
    """`eval/<task>/<name>` -> `eval/*/*`, for fnmatch."""
    return re.sub(r"<[^>]*>", "*", name)


def documented(name: str) -> str | None:
    """The METRICS entry that covers a logged key or a code name (exact first, then patterns)."""
    for doc, _ in METRICS:
        if doc == name or _pattern(doc) == _pattern(name):
            return doc
    literal = "<" not in name
    for doc, _ in METRICS:
        if literal and fnmatch.fnmatchcase(name, _pattern(doc)) and "/" in name:
            if name.count("/") == doc.count("/"):
                return doc
    return None


def render_metrics() -> str:
    code = code_metric_names()
    by_doc: dict[str, list[str]] = {}
    for name, files in code.items():
        doc = documented(name)
        if doc is not None:
            by_doc.setdefault(doc, []).extend(files)
    families: dict[str, list[tuple[str, str]]] = {}
    for name, what in METRICS:
        families.setdefault(name.split("/")[0], []).append((name, what))
    out = []
    for family, entries in families.items():
        out.append(f"## {family}\n\n| name | what it is | written by |\n|---|---|---|")
        for name, what in entries:
            files = sorted(set(by_doc.get(name, [])))
            where = ", ".join(f"`{f}`" for f in files) or "(logged under a pattern above)"
            out.append(f"| `{name}` | {what} | {where} |")
        out.append("")
    return "\n".join(out)
