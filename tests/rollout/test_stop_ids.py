"""Every engine stops on the same ids: the checkpoint's generation-config EOS ids, then the chat
template's end tokens. vLLM's engine reads them from the directory (it has a path, not the HF
model); the rollout server's client from the policy. Runs without vLLM: the engines are built
around a stand-in for the vLLM `LLM` and a server's `/info`, which the stop ids never touch."""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.fixture(scope="module")
def eos_dir(tiny_dir, tmp_path_factory):
    """The tiny model with an extra EOS id (7) in its generation config, as Qwen2.5-VL-Instruct
    ships `eos_token_id: [151645, 151643]`."""
    d = tmp_path_factory.mktemp("eos") / "tiny"
    shutil.copytree(tiny_dir, d)
    gc_path = d / "generation_config.json"
    gc = json.loads(gc_path.read_text()) if gc_path.exists() else {}
    gc["eos_token_id"] = [7]
    gc_path.write_text(json.dumps(gc))
    return d


def test_hf_vllm_and_server_engines_stop_on_the_same_ids(eos_dir, monkeypatch):
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout import server as server_mod
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    model, processor = load_policy(str(eos_dir))
    hf = HFRolloutEngine(model, processor).stop_ids
    assert hf[0] == 7 and len(hf) > 1  # the checkpoint's EOS first, the template's end tokens after

    # the directory's generation config, read by the vLLM engine itself
    assert VLLMRolloutEngine(str(eos_dir), processor, model.config, llm=object(), sleep=False).stop_ids == hf
    # the policy's, as the factory passes it
    assert VLLMRolloutEngine("unused", processor, model.config, llm=object(), sleep=False,
                             generation_config=model.generation_config).stop_ids == hf

    monkeypatch.setattr(server_mod, "call", lambda url, route, **kw: {"version": 0})
    monkeypatch.setattr(server_mod, "info_mismatches", lambda info, **kw: [])
    client = server_mod.ServerRolloutEngine("http://127.0.0.1:1", processor, model.config,
                                            generation_config=model.generation_config)
    assert client.stop_ids == hf


def test_make_engine_hands_the_policys_eos_ids_to_the_server_client(eos_dir, monkeypatch):
    from mmrlvr.config import load_config
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout import server as server_mod
    from mmrlvr.rollout.factory import make_engine

    model, processor = load_policy(str(eos_dir))
    monkeypatch.setattr(server_mod, "call", lambda url, route, **kw: {"version": 0})
    monkeypatch.setattr(server_mod, "info_mismatches", lambda info, **kw: [])
    monkeypatch.setattr(server_mod.ServerRolloutEngine, "sync_weights", lambda self, policy: None)
    cfg = load_config("configs/quickstart.yaml", ["rollout.engine=vllm_server", "rollout.server_url=http://127.0.0.1:1"])
    assert make_engine(cfg, model, processor).stop_ids[0] == 7
