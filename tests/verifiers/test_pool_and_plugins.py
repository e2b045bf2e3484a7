"""The worker pool's time bound, plug-in verifiers (file, module, entry point), `mmrlvr score`."""

import json
import textwrap

import pytest

from mmrlvr.types import Sample
from mmrlvr.verifiers import base
from mmrlvr.verifiers.pool import VerifierPool

PLUGIN = textwrap.dedent('''
    import time
    from mmrlvr.types import Verdict

    def exact(completion, sample):
        """1 when the completion equals the reference text."""
        ok = completion.strip() == str(sample.reference)
        return Verdict(float(ok), "exact" if ok else "different", {"chars": float(len(completion))})

    def hang(completion, sample):
        while True:
            time.sleep(0.05)

    def spin(completion, sample):
        while True:
            pass

    def deaf(completion, sample):
        import signal
        signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the in-worker alarm cannot fire (a mask would
        # not do: the worker's parent-watch thread would take the signal for the main thread)
        while True:
            time.sleep(0.05)

    def boom(completion, sample):
        raise RuntimeError("boom")

    def too_big(completion, sample):
        return 7.0
''')


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "my_verifiers.py"
    path.write_text(PLUGIN)
    return path


@pytest.mark.timeout(120)  # a pool without its time bound would hang here forever
def test_pool_bounds_time_and_survives_hangs(plugin):
    s = [Sample("a", (), "x")] * 3
    names = [f"{plugin}:{fn}" for fn in ("hang", "spin", "boom", "too_big", "exact")]
    with VerifierPool(timeout=0.5, workers=2, plugins=names) as pool:
        out = pool(f"{plugin}:hang", ["a", "b", "c"], s) + pool(f"{plugin}:spin", ["a"], s[:1])
        assert all(v.score == 0.0 and "timed out" in v.reason for v in out)
        boom = pool(f"{plugin}:boom", ["a"], s[:1])[0]
        assert boom.score == 0.0 and "RuntimeError: boom" in boom.reason
        assert pool(f"{plugin}:too_big", ["a"], s[:1])[0].score == 0.0  # 7.0 is a failure, not a reward
        fine = pool(f"{plugin}:exact", ["x", "y"], s[:2])  # the pool still works afterwards
        assert [v.score for v in fine] == [1.0, 0.0]
        assert pool("count", ["<answer>3</answer>"] * 50, [Sample("c", (), 3)] * 50)[49].score == 1.0


@pytest.mark.timeout(120)
def test_parent_deadline_kills_a_worker_that_ignores_its_alarm(plugin):
    s = [Sample("a", (), "x")]
    with VerifierPool(timeout=0.5, workers=1, grace=3.0, plugins=[f"{plugin}:deaf", f"{plugin}:exact"]) as pool:
        pool("count", ["<answer>1</answer>"], [Sample("c", (), 1)])  # start the worker first
        stuck = pool(f"{plugin}:deaf", ["a"], s)[0]
        assert stuck.score == 0.0 and "did not answer in time" in stuck.reason
        assert pool(f"{plugin}:exact", ["x"], s)[0].score == 1.0  # a fresh pool took over


def test_plugin_by_module_and_entry_point(plugin, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin.parent))
    assert base.resolve_verifier("my_verifiers:exact")("x", Sample("a", (), "x")).score == 1.0

    class EP:
        name, value = "shout", "my_verifiers:exact"

        def load(self):
            return base.resolve_verifier(self.value)

    monkeypatch.setattr(base, "_entry_points", lambda: {"shout": EP()})
    assert base.resolve_verifier("shout")("x", Sample("a", (), "x")).score == 1.0
    assert "shout" in base.available_verifiers()


def test_mmrlvr_score_cli(plugin, tmp_path, capsys):
    from mmrlvr.cli import main

    rows = [
        {"id": 1, "verifier": "math", "completion": "<answer>0.5</answer>", "reference": "\\frac{1}{2}"},
        "{not json",
        {"id": 3, "verifier": f"{plugin}:exact", "completion": "hello", "reference": "hello"},
        {"id": 4, "verifier": "iou", "completion": "[0,0,10,10]", "reference": [0, 0, 10, 5], "meta": {"image_size": [20, 20]}},
        {"id": 5, "completion": "x", "reference": 1},
        {"id": 6, "verifier": "no_such_verifier", "completion": "x", "reference": 1},
        {"id": 7, "verifier": "count", "completion": "<answer>2</answer>", "reference": 3},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["score", str(src), "-o", str(out), "-q", "--timeout", "5", "--verifier", f"{plugin}:exact", "--verifier", "math"]) == 1
    err = capsys.readouterr().err
    assert f"{src}:2: not valid JSON" in err
    assert f"{src}:5: missing field 'verifier'" in err
    assert f"{src}:6: verifier 'no_such_verifier'" in err
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [g["id"] for g in got] == [1, 3, 4, 7]  # input order, bad lines left out
    assert [g["score"] for g in got] == [1.0, 1.0, 0.5, 0.0]
    assert got[1]["parts"] == {"chars": 5.0} and got[3]["reason"] == "2 != 3"
    assert got[2]["meta"] == {"image_size": [20, 20]}  # the input is kept
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps(rows[0]) + "\n")
    assert main(["score", str(ok), "-o", str(tmp_path / "o2.jsonl"), "-q"]) == 0


EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("ran")

def fn(completion, sample):
    return 1.0
"""


@pytest.mark.parametrize("workers", [0, 1])
def test_a_data_row_never_runs_code(tmp_path, capsys, workers):
    """`"verifier": "/path/evil.py:fn"` in a row is refused and the file never imported."""
    from mmrlvr.cli import main

    marker = tmp_path / "ran.txt"
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL.format(marker=str(marker)))
    rows = [{"verifier": f"{evil}:fn", "completion": "x", "reference": 1},
            {"verifier": "os:system", "completion": "touch " + str(marker), "reference": 1},
            {"verifier": "count", "completion": "<answer>1</answer>", "reference": 1}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    assert main(["score", str(src), "-o", str(out), "-q", "--workers", str(workers)]) == 1
    err = capsys.readouterr().err
    assert f"{src}:1: verifier '{evil}:fn' is not a registered verifier" in err and "--verifier" in err
    assert f"{src}:2: verifier 'os:system' is not a registered verifier" in err
    assert not marker.exists()  # neither the file nor the module ran
    assert [json.loads(x)["score"] for x in out.read_text().splitlines()] == [1.0]
    # named by the user on the command line, the same plug-in runs; rows without a verifier use it
    src.write_text(json.dumps({"completion": "x", "reference": 1}) + "\n" + json.dumps(rows[0]) + "\n")
    assert main(["score", str(src), "-o", str(out), "-q", "--workers", str(workers), "--verifier", f"{evil}:fn"]) == 0
    assert [json.loads(x)["score"] for x in out.read_text().splitlines()] == [1.0, 1.0]
    assert marker.exists()


def test_a_task_sample_never_chooses_code(tmp_path):
    """For task data: a sample naming a plug-in is refused unless the config's rewards name it."""
    from mmrlvr.config import ConfigError
    from mmrlvr.checks.validate import check_sample_verifiers
    from mmrlvr.verifiers.score import InProcessScorer
    from mmrlvr.verifiers.base import UntrustedVerifier

    spec = f"{tmp_path / 'evil.py'}:fn"
    samples = [Sample("ok", (), 1, "count"), Sample("row-7", (), 1, spec)]
    with pytest.raises(ConfigError, match="sample 'row-7': verifier .* is not a registered verifier"):
        check_sample_verifiers(samples)
    check_sample_verifiers(samples, plugins=[spec])  # the config's rewards: named it
    with pytest.raises(UntrustedVerifier):  # the scorers the loop builds refuse it too
        InProcessScorer(plugins=[])(spec, ["x"], samples[1:])
    with pytest.raises(UntrustedVerifier):
        VerifierPool(workers=1, plugins=[])(spec, ["x"], samples[1:])
    from mmrlvr.train.rewards import reward_terms

    with pytest.raises(UntrustedVerifier):  # and so does the reward step, whatever the scorer
        reward_terms([], samples[1])
    assert reward_terms([], samples[0]) == [("count", 1.0)]


def test_verifiers_cli_lists_builtins(capsys):
    from mmrlvr.cli import main

    assert main(["verifiers"]) == 0
    out = capsys.readouterr().out
    for name in ("math", "choice", "number", "iou", "boxes", "order", "tiou", "format", "count"):
        assert any(line.startswith(name + " ") for line in out.splitlines()), name
