"""Pure tensor math of RL updates: advantages, losses, group sampling, token weights."""
