"""Verifier workers exit when the trainer is SIGKILLed (no cleanup code runs then)."""

import os
import signal
import subprocess
import sys
import time

import pytest

PARENT = """
import sys
from mmrlvr.types import Sample
from mmrlvr.verifiers.pool import VerifierPool

pool = VerifierPool(timeout=5, workers=2)
pool("count", ["<answer>1</answer>"] * 8, [Sample("s", (), 1)] * 8)
print(" ".join(str(p.pid) for p in pool._pool._processes.values()), flush=True)
sys.stdin.read()  # wait to be killed
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(180)
def test_workers_exit_when_the_parent_is_sigkilled():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(p) for p in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 60  # a guard against hanging, not a timing: exit is immediate
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers), "verifier workers outlived their SIGKILLed parent"
    finally:
        parent.kill()
