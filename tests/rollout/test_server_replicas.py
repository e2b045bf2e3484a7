"""The rollout server's data-parallel replicas (`server_replicas.Replicas`) as processes: a
generation cut into whole runs per replica and joined in order, a call reaching every replica with
its own arguments, a replica's error raised once every replica has answered (so the next call reads
fresh answers, never a stale one), the child processes stopped at close.

The engines here answer with where they ran (no vLLM in this environment): the replicas' whole path
inside vLLM runs in `test_vllm_server_parallel.py` (CI's vLLM job)."""

from __future__ import annotations

import pytest

from mmrlvr.rollout.server_replicas import Replicas


class WhereEngine:
    """Answers each request with (replica, prompt); `collective_rpc` with (replica, args)."""

    def __init__(self, replica: int):
        self.replica = replica
        self.llm = self

    def generate_raw(self, prompts, params):
        if "boom" in prompts:
            raise ValueError("boom")
        return [[(self.replica, p, q)] for p, q in zip(prompts, params)]

    def collective_rpc(self, name, args=()):
        return [(self.replica, name, tuple(args))]

    def reset_caches(self):
        return None


def build_where(args) -> WhereEngine:
    """A child replica's engine (module level: the spawned process imports it by name)."""
    return WhereEngine(args)


def test_requests_are_cut_into_whole_runs_every_replica_answers_and_errors_leave_no_stale_answer():
    pool = Replicas(WhereEngine(0), build_where, 1, replicas=2, devices_each=1)
    try:
        out = pool.generate_raw(["a", "b", "c"], [1, 2, 3])
        assert out == [[(0, "a", 1)], [(0, "b", 2)], [(1, "c", 3)]]  # runs of 2 and 1, in order
        assert pool.collective_rpc("m", lambda k: (k * 2,)) == [[(0, "m", (0,))], [(1, "m", (2,))]]
        with pytest.raises(RuntimeError, match="ValueError: boom"):
            pool.generate_raw(["a", "boom"], [1, 2])  # the child's run fails
        with pytest.raises(ValueError, match="boom"):
            pool.generate_raw(["boom", "a"], [1, 2])  # this process's run fails; the child's answer is still read
        assert pool.generate_raw(["x", "y"], [5, 6]) == [[(0, "x", 5)], [(1, "y", 6)]]
        pool.reset_caches()
    finally:
        pool.close()
    assert [p.exitcode for p in pool._children] == [0]
