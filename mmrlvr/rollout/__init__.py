"""Rollout engines: sample G completions per prompt (HF generate here, vLLM on GPUs)."""
