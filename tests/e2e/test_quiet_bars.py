"""A run's output is its own: datasets' "Map" / "Generating train split" / "Creating json" bars and
transformers' "Loading weights" bar are off while `mmrlvr.run` or the CLI runs, and a script's own
settings are back afterwards."""

import json

import datasets
from transformers.utils import logging as hf_logging

import mmrlvr
from mmrlvr.models.quiet_bars import quiet_third_party_bars

SMALL = ["task.train_size=4", "task.eval_size=2", "warm_start.steps=0", "rollout.prompts_per_step=2",
         "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=1", "train.save_every=0",
         "eval.batch_size=2", "verifier_workers=0"]
BARS = ("Generating train split", "Map", "Creating json", "Loading weights", "Saving the dataset", "Writing model shards")


def test_bars_are_off_inside_and_as_they_were_after():
    was = datasets.is_progress_bar_enabled(), hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a script's own choice: transformers off, datasets on
    datasets.enable_progress_bars()
    try:
        with quiet_third_party_bars():
            assert not datasets.is_progress_bar_enabled() and not hf_logging.is_progress_bar_enabled()
        assert datasets.is_progress_bar_enabled() and not hf_logging.is_progress_bar_enabled()
    finally:  # the process's settings as the test found them
        datasets.enable_progress_bars() if was[0] else datasets.disable_progress_bars()
        hf_logging.enable_progress_bar() if was[1] else hf_logging.disable_progress_bar()


def test_a_run_on_rows_from_python_shows_no_library_bar(tmp_path, shared_data, capfd):
    folder = shared_data / "chart_mathv_statistics"
    rows = [json.loads(x) for x in (folder / "annotations.jsonl").read_text().splitlines()][:8]
    rows = [{"image": str(folder / r["image"]), "question": r["question"], "answer": r["answer"],
             "options": r["options"]} for r in rows]
    summary = mmrlvr.run("configs/chart_tiny.yaml", train_data=rows,
                         overrides=[*SMALL, f"output_dir={tmp_path / 'run'}",
                                    f"task.args.cache_dir={tmp_path / 'cache'}"])  # a cold cache: datasets reads the rows
    out = capfd.readouterr()
    assert summary["steps"] == 1
    shown = [b for b in BARS if b in out.err + out.out]
    assert shown == [], out.err[-2000:]
    assert datasets.is_progress_bar_enabled()  # the caller's setting is back


def test_a_cli_run_on_a_data_file_shows_no_library_bar(tmp_path, shared_data, capfd):
    from mmrlvr.cli import main

    data = shared_data / "chart_mathv_statistics" / "annotations.jsonl"
    assert main(["train", "configs/chart_tiny.yaml", *SMALL, f"output_dir={tmp_path / 'run'}", f"task.args.data={data}",
                 f"task.args.cache_dir={tmp_path / 'cache'}"]) == 0
    out = capfd.readouterr()
    assert "held-out" in out.err + out.out  # our own lines are there
    assert [b for b in BARS if b in out.err + out.out] == [], out.err[-2000:]
