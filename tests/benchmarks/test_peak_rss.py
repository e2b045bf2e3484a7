"""`peak_rss_mb()` is the calling process's own peak: a small child of a large parent reports its
own few MB, not the parent's footprint that Linux carries into a child's `ru_maxrss`."""

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CHILD = ("import sys, resource; sys.path.insert(0, '.'); from benchmarks.common import peak_rss_mb; "
         "print(peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")


def test_a_small_child_of_a_large_parent_reports_its_own_peak():
    block = np.ones(400 * 2**20 // 8)  # 400 MB resident in the parent
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, check=True)
    own, inherited = map(float, out.stdout.split())
    assert inherited > 400  # what ru_maxrss says: the parent's footprint
    assert own < 100  # the child itself: the interpreter and its imports
    del block


def test_the_peak_sees_an_allocation_of_this_process():
    code = ("import sys; sys.path.insert(0, '.'); import numpy as np; from benchmarks.common import peak_rss_mb; "
            "a = peak_rss_mb(); b = np.ones(200 * 2**20 // 8); print(a, peak_rss_mb())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    before, after = map(float, out.stdout.split())
    assert 190 < after - before < 260  # the 200 MB block, touched
