import collections

import numpy as np

from mmrlvr.tasks import load_task
from mmrlvr.tasks.counting import COLORS


def test_deterministic_and_held_out_never_in_training():
    train = load_task("counting", "train", 3000, seed=3)
    again = load_task("counting", "train", 3000, seed=3)
    held = load_task("counting", "eval", 256, seed=3)
    assert [s.reference for s in train] == [s.reference for s in again]
    assert np.array_equal(np.asarray(train[7].images[0]), np.asarray(again[7].images[0]))
    boards = lambda samples: {tuple(map(tuple, s.meta["board"])) for s in samples}  # noqa: E731
    held_boards = boards(held)
    assert len(held_boards) > 200
    assert not boards(train) & held_boards  # no held-out board (cells, colours, shapes) is trained on
    # small boards (an empty one, one shape) repeat often by chance: the exclusion does real work
    import random

    from mmrlvr.tasks.counting import _layout

    rng = random.Random("counting-train-3")
    raw = [tuple(map(tuple, sorted(_layout(rng, 5, 9)))) for _ in range(3000)]
    assert sum(b in held_boards for b in raw) > 0
    assert len({s.id for s in train} | {s.id for s in held}) == 3256


def test_reference_is_the_number_of_red_shapes_drawn():
    red = np.array(COLORS["red"])
    for s in load_task("counting", "eval", 40, seed=0):
        img = np.asarray(s.images[0]).astype(int)
        assert img.shape == (112, 112, 3)
        cells = 0
        for r in range(4):
            for c in range(4):
                patch = img[r * 28:(r + 1) * 28, c * 28:(c + 1) * 28]
                cells += int((np.abs(patch - red).sum(-1) < 30).sum() > 20)
        assert cells == s.reference


def test_teacher_overcounts_as_documented():
    train = load_task("counting", "train", 4000, seed=0, flaw_min=3, flaw_prob=0.7)
    wrong = collections.Counter((s.reference >= 3, s.meta["teacher"] != s.reference) for s in train)
    assert wrong[(False, True)] == 0  # boards with 0-2 red shapes: always right
    flawed = wrong[(True, True)] / (wrong[(True, True)] + wrong[(True, False)])
    assert 0.65 < flawed < 0.75
    assert all(s.target == f"<answer>{s.meta['teacher']}</answer>" for s in train[:50])


def test_one_size_drives_eval_split_and_training_exclusion():
    """task.eval_size=1000 with the default task args: the loop's args make the training split
    exclude all 1000 evaluated boards (with the old default of 256 excluded, 13 leaked)."""
    from mmrlvr.config import load_config
    from mmrlvr.train.setup import task_args

    cfg = load_config(None, ["task.eval_size=1000", "task.train_size=4096"])
    args = task_args(cfg)
    assert args["eval_size"] == 1000
    boards = lambda samples: {tuple(map(tuple, s.meta["board"])) for s in samples}  # noqa: E731
    held = boards(load_task("counting", "eval", cfg.task.eval_size, cfg.seed, **args))
    train = boards(load_task("counting", "train", cfg.task.train_size, cfg.seed, **args))
    assert not held & train
    leaked = held & boards(load_task("counting", "train", 4096, cfg.seed, eval_size=256))
    assert leaked  # what the exclusion by the wrong count let through
    bad = load_config(None, ["task.eval_size=1000", "task.args={eval_size: 256}"])
    import pytest

    with pytest.raises(ValueError, match="task.args.eval_size=256 differs from task.eval_size=1000"):
        task_args(bad)
