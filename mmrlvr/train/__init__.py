"""The training loop and what it needs: log-probs, checkpoints, metrics, warm start."""
