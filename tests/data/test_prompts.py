"""Image placeholders -> chat-template image slots, in order."""

import pytest

from mmrlvr.data.io import BadRow
from mmrlvr.data.prompts import build_messages


def _kinds(msgs):
    return [c["type"] if c["type"] == "image" else c["text"] for c in msgs[0]["content"]]


@pytest.mark.parametrize("question, images, kinds, order", [
    ("What is x?", ["a"], ["image", "What is x?"], ["a"]),                     # no placeholder: image first
    ("<image>Find x.", ["a"], ["image", "Find x."], ["a"]),
    ("See <image2> then <image1>.", ["a", "b"], ["See", "image", "then", "image", "."], ["b", "a"]),
    ("<image> and <image>", ["a", "b"], ["image", "and", "image"], ["a", "b"]),
    ("<image2> only", ["a", "b"], ["image", "image", "only"], ["a", "b"]),     # unnamed a goes first
    ("Q <image1>\n<image2>", ["a"], ["Q", "image"], ["a"]),                  # MATH-V composite image
])
def test_placeholders(question, images, kinds, order):
    msgs, slots = build_messages(question, images)
    assert _kinds(msgs) == kinds and list(slots) == order


def test_dangling_placeholder_is_a_bad_row():
    with pytest.raises(BadRow, match="<image3> but the row has 2"):
        build_messages("<image3>", ["a", "b"])
    with pytest.raises(BadRow, match="<image> but the row has 0"):
        build_messages("<image>", [])


def test_suffix_is_last():
    msgs, _ = build_messages("Q?", ["a"], "Answer in tags.")
    assert _kinds(msgs) == ["image", "Q?", "\nAnswer in tags."]
