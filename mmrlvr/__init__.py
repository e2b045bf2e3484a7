"""mmrlvr: reinforcement learning with verifiable rewards for vision-language models."""

__version__ = "0.1.0"
__all__ = ["run"]


def __getattr__(name: str):
    """`mmrlvr.run` is imported on first use, so `import mmrlvr` stays light (no torch)."""
    if name == "run":
        from mmrlvr.api import run

        return run
    raise AttributeError(f"module 'mmrlvr' has no attribute {name!r}")


def __dir__() -> list[str]:
    """`dir(mmrlvr)` shows the public API (`run`), which is looked up lazily and so is not yet in
    the module's namespace."""
    return sorted(set(globals()) | set(__all__))
