import pytest


@pytest.fixture(scope="session")
def family_policy():
    """(model, processor) of `tiny:<model_type>`, built once per session in the test cache."""
    from mmrlvr.config import ModelConfig
    from mmrlvr.models.load import load_policy

    loaded = {}

    def get(model_type: str, **cfg):
        key = (model_type, tuple(sorted(cfg.items())))
        if key not in loaded:
            loaded[key] = load_policy(ModelConfig(path=f"tiny:{model_type}", **cfg))
        return loaded[key]

    return get
