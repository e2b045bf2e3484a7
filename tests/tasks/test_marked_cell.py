import numpy as np
import pytest

from mmrlvr.tasks import load_task
from mmrlvr.tasks.marked_cell import CELL, COLORS
from mmrlvr.verifiers.base import resolve_verifier, safe_verify


def test_boards_are_deterministic_and_eval_never_in_train():
    a = load_task("marked_cell", "train", 64, 0, eval_size=64)
    b = load_task("marked_cell", "train", 64, 0, eval_size=64)
    assert [s.meta for s in a] == [s.meta for s in b]
    assert np.array_equal(np.asarray(a[0].images[0]), np.asarray(b[0].images[0]))
    ev = load_task("marked_cell", "eval", 64, 0)
    key = lambda s: (s.meta["marked"], s.meta["color"], s.meta["n_shapes"], np.asarray(s.images[0]).tobytes())  # noqa: E731
    assert not {key(s) for s in ev} & {key(s) for s in a}


def test_the_black_frame_surrounds_a_shape_of_the_reference_colour():
    for s in load_task("marked_cell", "eval", 24, 1):
        img = np.asarray(s.images[0]).astype(int)
        assert img.shape == (6 * CELL, 6 * CELL, 3)
        r, c = divmod(s.meta["marked"], 6)
        cell = img[r * CELL : (r + 1) * CELL, c * CELL : (c + 1) * CELL]
        assert (cell[0] == 0).all() and (cell[:, 0] == 0).all()  # black frame, top and left edges
        inside = cell[2:-2, 2:-2].reshape(-1, 3)
        assert (np.abs(inside - COLORS[s.meta["color"]]).sum(1) == 0).any()  # the shape's exact colour
        # exactly one black-framed cell on the board
        corners = [img[i * CELL, j * CELL] for i in range(6) for j in range(6)]
        assert sum(int((x == 0).all()) for x in corners) == 1


def test_teacher_is_right_and_other_colours_score_zero():
    for s in load_task("marked_cell", "eval", 12, 0):
        assert safe_verify(resolve_verifier(s.verifier), s.target, s).score == 1.0
        wrong = next(c for c in COLORS if c != s.meta["color"])
        assert safe_verify(resolve_verifier(s.verifier), f"<answer>{wrong}</answer>", s).score == 0.0


def test_bad_arguments_name_the_task():
    with pytest.raises(ValueError, match="marked_cell"):
        load_task("marked_cell", "train", 4, 0, min_shapes=40)
    with pytest.raises(ValueError, match="unknown split"):
        load_task("marked_cell", "test", 4, 0)
