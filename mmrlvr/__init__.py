"""mmrlvr: reinforcement learning with verifiable rewards for vision-language models."""

__version__ = "0.1.0"
