"""Run configuration: nested dataclasses loaded from YAML with dotted command-line overrides.

`load_config("configs/quickstart.yaml", ["train.lr=1e-5", "algo.algorithm=dapo"])`. Every field
has a default, so a YAML file names only what it changes; an unknown key is an error that says
which keys exist and which one was probably meant, because a typo silently ignored is a wasted run
(`mmrlvr.config.keys`: "did you mean", and blaming the override that set a bad key or value).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mmrlvr.config.efficiency import SampleEfficiencyConfig, dbb_named
from mmrlvr.config.rollout import RolloutConfig
from mmrlvr.config.sections import section_field
from mmrlvr.config.limits import MAX_CONFIG_VALUES, check_expanded_size, short  # noqa: F401 - re-exported
from mmrlvr.config.keys import ConfigError, _parse_value, apply_overrides, blame, did_you_mean  # noqa: F401 - re-exported
from mmrlvr.config.typed import build


@dataclass
class ModelConfig:
    path: str = "tiny"
    """A local directory or hub name for AutoModelForImageTextToText; "tiny" = the embedded default
    (a tiny Qwen2.5-VL); "tiny:<model_type>" = a tiny random model of that family built offline
    (qwen2_5_vl, qwen2_vl, qwen3_vl, gemma3, idefics3, llava_onevision; docs/how-to/model-families.md)."""
    dtype: str = "float32"
    """float32 on CPU; bfloat16 on GPUs. The dtype every forward computes in (rollout, update,
    reference, evaluation) and of the served `model/`; training keeps the trainable weights as
    float32 master weights whatever it is (checkpoints hold those). float16 trains nowhere (no
    loss scaling); it evaluates."""
    attn_implementation: str = "sdpa"
    """sdpa, eager or flash_attention_2."""
    min_pixels: int | None = None
    """Image resize lower bound in pixels (None: the processor's own)."""
    max_pixels: int | None = None
    """Image resize upper bound in pixels (None: the processor's own)."""
    video_min_pixels: int | None = None
    """Per-frame video resize lower bound in pixels (None: the video processor's own)."""
    video_max_pixels: int | None = None
    """Per-frame video resize upper bound in pixels (None: the video processor's own; frames are
    decoded no larger than this)."""
    video_max_frames: int = 32
    """Most frames decoded per video, whatever a task asks for (memory bound)."""
    video_total_pixels: int | None = 24576 * 28 * 28
    """Most decoded pixels per sample over all its videos' frames (about 24k visual tokens of
    28x28 before temporal merging); larger videos are downscaled evenly."""
    freeze_vision: bool = False
    """Keep the vision tower fixed (common for large models)."""
    lora_rank: int = 0
    """0 trains all weights; > 0 wraps the language model in a LoRA adapter (peft)."""
    lora_alpha: int = 32
    """LoRA scaling numerator."""
    gradient_checkpointing: bool = False
    """Trade compute for memory on big models."""


@dataclass
class TaskConfig:
    name: str = "counting"
    """A module in tasks/ (installed as mmrlvr.tasks.<name>) or "package.module", providing build(split, size, seed, **args)."""
    train_size: int = 4096
    """Training prompts (synthetic tasks generate them from the seed)."""
    eval_size: int = 256
    """Held-out prompts, never overlapping training."""
    args: dict = field(default_factory=dict)
    """Task-specific options, passed to the task's build function; `mmrlvr tasks` lists each task's, with defaults and column keys."""
    max_bad_frac: float | None = None
    """Rows the run may skip, as a fraction of the data file's rows: rows that fail at load (a missing answer, a malformed cell) and rows whose image or video fails to decode count together, in training and in evaluation; past it the run stops naming them. Unset: 1% of the rows, at least one row."""
    max_bad_media_frac: float | None = None
    """Deprecated: use task.max_bad_frac (decode failures no longer have a limit of their own)."""


@dataclass
class WarmStartConfig:
    steps: int = 0
    """Supervised steps on the task's teacher completions before RL (0: none)."""
    lr: float = 1e-3
    """Learning rate of the warm start."""
    batch_size: int = 32
    """Sequences per supervised step."""
    checkpoint: str | None = None
    """Load this warm-started model instead of training one (a directory)."""


@dataclass
class AlgoConfig:
    algorithm: str = "grpo"
    """Preset: grpo, dr_grpo, dapo, gspo, rloo or reinforce_pp. Fields left null take its defaults."""
    advantage: str | None = None
    """Advantage estimator name in mmrlvr.algos.advantages (ADVANTAGES); dbb, the per-prompt Beta baseline, reads
    its settings from sample_efficiency.dbb."""
    clip_low: float | None = None
    """PPO clip below 1 (ratio >= 1 - clip_low)."""
    clip_high: float | None = None
    """PPO clip above 1 (ratio <= 1 + clip_high); > clip_low is DAPO's clip-higher."""
    dual_clip: float | None = None
    """Dual-clip PPO's bound c on the loss of negative-advantage tokens, -A * min(r, c), as verl's
    clip_ratio_c (default 3.0 there and here): a token whose ratio ran far above 1 cannot push
    the loss without bound; 0 turns it off. Must be 0 or > 1."""
    importance_level: str | None = None
    """token (PPO/GRPO) or sequence (GSPO)."""
    aggregation: str | None = None
    """token-mean, seq-mean-token-mean or seq-mean-token-sum-norm."""
    norm_length: int | None = None
    """Constant length for seq-mean-token-sum-norm (default max_new_tokens)."""
    kl_coef: float | None = None
    """Weight of the KL penalty to the reference policy (0: no reference model is kept)."""
    kl_kind: str | None = None
    """k1, k2 or k3."""
    entropy_coef: float | None = None
    """Entropy bonus weight (0: off; negative: a penalty, as VPPO's released script uses)."""
    dynamic_sampling: bool | None = None
    """DAPO: drop groups with all-equal rewards and sample again."""
    max_rounds: int | None = None
    """Most sampling rounds per step when dynamic sampling is on."""
    overlong_buffer: int | None = None
    """DAPO overlong shaping: penalty starts this many tokens before max_new_tokens (0: off)."""
    overlong_factor: float | None = None
    """Penalty reached at max_new_tokens."""
    mask_truncated: bool | None = None
    """Exclude truncated completions from the loss."""
    ppo_epochs: int | None = None
    """Update passes over each rollout batch."""
    mini_batches: int | None = None
    """Optimizer steps per epoch (the batch is split into this many mini-batches)."""
    grad_accum: int | None = None
    """Micro-batches per mini-batch whose gradients are summed before one optimizer step."""
    rollout_correction: str | None = None
    """How the policy loss corrects the sampler/learner gap: none, token_tis, token_mis, seq_tis,
    seq_mis, token_rs or seq_rs (importance weights r = pi_old / pi_sampler per token or per
    sequence: tis truncated at the cap, mis kept within it and 0 beyond as TRL's token_mask /
    sequence_mask, rs the 0/1 filter alone as verl's rejection sampling;
    mmrlvr.algos.losses.rollout_correction_weights). Default: token_tis with rollout.engine=vllm or
    vllm_server (also one step off-policy, rollout.async_steps=1), none with hf (the sampler is the learner)."""
    rollout_correction_cap: float = 2.0
    """Cap of the correction's importance ratio (tis: weights truncated at it; mis and rs: tokens or
    sequences above it masked out). Must be > 0."""


@dataclass
class RewardTerm:
    verifier: str = "count"
    """Registry name, "path/file.py:fn" or "package.module:fn"."""
    weight: float = 1.0
    """Weight in the summed reward."""


LR_SCHEDULES = ("constant", "linear", "cosine")
"""`train.lr_scheduler` values (`mmrlvr.train.schedule` computes them; `mmrlvr.checks.validate` checks them)."""


@dataclass
class TrainConfig:
    steps: int = 100
    """RL steps."""
    prompt_once: bool = True
    """Learner forwards run each prompt once per group and its G completions from the repeated KV cache
    (same math; log-probs move by float rounding ~1e-6). false: one forward of every joined row."""
    chunked_head: bool = True
    """The output layer in blocks of 4M logits, each recomputed in the backward, where a micro-batch's completion
    logits are larger (wide vocabularies: 321 MB at 151,936 x 16 rows x 33 tokens), in the update and the supervised
    warm start (`mmrlvr.models.patches.chunked_head`); false: whole logits."""
    recompute_mlp: bool = True
    """The language model's gated MLPs keep gate(x) and up(x) for the backward and recompute the activation and the
    product there (`mmrlvr.models.patches.gated_mlp`): 2 of 4 intermediate-size tensors per token and layer, the same
    gradients bit for bit, in the update and the supervised warm start; false: autograd keeps all four."""
    recompute_norm: bool = True
    """The language model's RMSNorms, fed bf16 or fp16, keep only their input for the backward and recompute the rest
    there (`mmrlvr.models.patches.rms_norm`): 2 bytes an element instead of 6, the same gradients bit for bit, in the
    update and the supervised warm start; float32 models are unaffected; false: autograd keeps the float32 copy and the
    normed tensor."""
    mask_once: bool = True
    """The language model's attention layers share one additive copy of the boolean attention mask, made once per
    forward, instead of SDPA making and keeping one per layer (`mmrlvr.models.patches.attention_mask`): the same
    numbers bit for bit, in the update and the supervised warm start; false: one copy per layer."""
    padding_free: bool = False
    """Learner log-prob forwards (update, reference, pi_old, entropy, visual dependency) run each micro-batch as one packed
    sequence of its rows' real tokens, attention inside each row (`mmrlvr.models.packing`), replacing prompt_once. Qwen2-VL,
    Qwen2.5-VL, Qwen3-VL with sdpa/eager only (else refused). Off: on CPU it paid only where padding_waste was ~2.7."""
    micro_batch_tokens: int | None = None
    """Most tokens one learner forward computes (update, reference, pi_old, token signals): rows are grouped by
    length into micro-batches whose tokens as the forward pays for them (each prompt once per group under
    prompt_once, completions padded to the micro-batch's longest) stay within it, like verl's
    ppo_max_token_len_per_gpu (`mmrlvr.train.micro_batches`). It replaces algo.grad_accum (leave that unset); a row
    longer than the budget is a micro-batch of its own; every loss still divides by the whole mini-batch's tokens or
    sequences, so the gradient is the same; ranks run as many passes as the busiest one (zero-weight passes pad the
    others); token signals then take their own forward (no share_forward). Logged: train/micro_batches,
    train/padding_waste. null: micro-batches of rows / (algo.mini_batches x algo.grad_accum)."""
    lr: float = 1e-4
    """Policy learning rate (AdamW): the peak of the schedule."""
    lr_scheduler: str = "constant"
    """constant, linear (decay to 0) or cosine (to 0), over train.steps RL steps (transformers' factors)."""
    warmup_steps: int = 0
    """RL steps of linear warm-up from 0 to train.lr before the schedule."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold."""
    max_nonfinite_steps: int = 3
    """An optimizer step whose loss or gradient is not finite (NaN/inf) is skipped, the weights and
    optimizer state left as they were (`actor/nonfinite_skipped` counts them), like DeepSpeed's and
    verl's overflow handling; after this many in a row the run stops with one line."""
    log_every: int = 10
    """Steps between printed/sampled logs (metrics are written every step)."""
    eval_every: int = 0
    """Steps between held-out evaluations (0: only before and after)."""
    save_every: int = 50
    """Steps between checkpoints (0: only at the end)."""
    resume: bool = True
    """Continue from the newest checkpoint in output_dir if there is one. The saved config.yaml
    must then match this config (apart from train.steps and logging keys); a difference stops the
    run, naming the keys. false starts over: it deletes checkpoints/, model/ and the rest of the
    earlier run in output_dir (only files a run wrote)."""
    resume_force: bool = False
    """Resume even though the config differs from the run's saved config.yaml (the old file is
    kept as config.prev.yaml). For deliberate changes, e.g. a lower learning rate mid-run."""
    allow_nonempty_output_dir: bool = False
    """Use an output_dir that already holds files but no earlier mmrlvr run (refused by default, so a
    typo'd or shared directory never loses a file). The run writes beside those files and never deletes
    or replaces one it did not write: a file or folder named like one the run writes (config.yaml,
    metrics.jsonl, model/, checkpoints/, samples/...) is still refused."""
    log_with: list[str] = field(default_factory=lambda: ["tensorboard"])
    """accelerate trackers: tensorboard, wandb, mlflow, trackio... ([] = metrics.jsonl only)."""


@dataclass
class EvalConfig:
    batch_size: int = 64
    """Prompts per evaluation batch (generated, then scored); the HF engine splits each batch further into `generate`
    calls of at most rollout.generate_max_rows rows (with eval --samples K: K rows per prompt)."""
    max_new_tokens: int | None = None
    """Defaults to rollout.max_new_tokens."""
    verifiers: list[str] = field(default_factory=list)
    """Verifiers to evaluate with (weight 1 each); empty: the configured rewards, else each sample's own."""


@dataclass
class Config:
    seed: int = 0
    """Seeds data, sampling and initialisation; same seed, same numbers on the same machine."""
    output_dir: str = "runs/default"
    """Run directory: config.yaml, metrics.jsonl, tensorboard events, samples/, checkpoints/."""
    threads: int = 1
    """torch CPU threads; 1 is fastest for tiny models on small VMs (OpenMP spin-waits)."""
    device: str = "auto"
    """auto (accelerate picks), cpu or cuda."""
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    temporal_contrast: Any = section_field("temporal_contrast")
    """T-GRPO / TGPO temporal contrast for video prompts (off by default)."""
    token_weighting: Any = section_field("token_weighting")
    rewards: list[RewardTerm] = field(default_factory=list)
    """Weighted verifiers; empty: each sample's own verifier with weight 1."""
    verifier_timeout: float = 5.0
    """Seconds a verifier may take on one completion before it scores 0."""
    verifier_workers: int = 2
    """Worker processes that run verifiers under the time-out; 0 runs them in-process (no bound)."""
    verifier_stop_share: float | None = 0.5
    """The run stops with one line (non-zero exit, the last checkpoint intact) when a reward term
    fails (raises, times out, returns no number) on every item of a step, or on more than this
    share of its items over the last 3 steps; occasional failures only warn. null: never stop."""
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sample_efficiency: SampleEfficiencyConfig = field(default_factory=SampleEfficiencyConfig)
    """Prompt replay, DBB advantages and demonstrations (all off by default)."""


def _build(cls: type, raw: Any, where: str) -> Any:
    """`raw` as a `cls` (`mmrlvr.config.typed.build`), suggestions drawn from the whole `Config`."""
    return build(cls, raw, where, Config)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read YAML (optional), apply dotted overrides, and validate into a `Config`."""
    raw: dict = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:  # missing, a directory, unreadable: one line, no traceback
            raise ConfigError(f"config {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"config {path}: not UTF-8 text") from None
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
    return build_config(raw, list(overrides or []), str(path) if path is not None else None)


def build_config(raw: dict, overrides: list[str], source: str | None = None) -> Config:
    """`raw` (from `source`, a YAML path, or None: a dict from Python) with `overrides` applied, as
    a `Config`; an error is blamed on the override that set its key, else on `source`."""
    raw = apply_overrides(raw, overrides)
    check_expanded_size(raw, source or "config")  # no YAML file: a dict from Python, or overrides alone
    try:
        return _build(Config, raw, "")
    except ConfigError as exc:
        raise blame(exc, overrides, source) from None


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def portable_model_path(raw: dict) -> dict:
    """The config as the run directory records it: a relative `model.path` naming an existing
    directory is made absolute, so the saved config.yaml (and `mmrlvr eval` on it) works from any
    directory; a tiny name or hub id is kept as it is."""
    model = raw.get("model") if isinstance(raw, dict) else None
    path = model.get("path") if isinstance(model, dict) else None
    if isinstance(path, str) and path and not path.startswith("tiny") and not Path(path).expanduser().is_absolute():
        local = Path(path).expanduser()
        if local.is_dir():
            return {**raw, "model": {**model, "path": str(local.resolve())}}
    return raw


def read_as_saved_today(raw: dict) -> dict:
    """A run directory's config.yaml, written by an older version, as this version writes it: its
    relative model path made absolute, a DBB run's estimator named (`dbb_named`). A resume compares
    it with the new config key by key, so an old run is not refused for what only the format changed."""
    return dbb_named(portable_model_path(raw))


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config; the rollout server's key is left out (a secret never lands in a run directory)."""
    d = portable_model_path(to_dict(cfg))
    if isinstance(d.get("rollout"), dict) and d["rollout"].get("server_key") is not None:
        d["rollout"]["server_key"] = None
    Path(path).write_text(yaml.safe_dump(d, sort_keys=False))
