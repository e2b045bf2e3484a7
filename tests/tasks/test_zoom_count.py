"""The zoom tool and its task: boxes parsed and validated, crops enlarged within the pixel limit,
the task's answer inside the named box, and its warm-start conversations rendered exactly as the
`tools` episode renders them (so what the warm start teaches is what the episode shows)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
from PIL import Image

from mmrlvr.data.zoom import box_problem, parse_call, zoom, zoom_size
from mmrlvr.methods.tools.episode import tools_turn
from mmrlvr.rollout.episodes import EpisodeState, message_tokens, template_bridge
from mmrlvr.tasks import zoom_count


def test_parse_call():
    assert parse_call("look <zoom>[0, 112, 112, 224]</zoom> then") == (0, 112, 112, 224)
    assert parse_call("<crop>5,6,70,80</crop>") == (5, 6, 70, 80)
    assert parse_call("<answer>3</answer>") is None
    assert parse_call("<zoom>[1, 2, 3]</zoom>") is None


# the pattern before it was made linear: the oracle for what a call means
_QUADRATIC = re.compile(r"<(zoom|crop)>\s*\[?\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*\]?\s*</(?:zoom|crop)>")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<zoom>", "</zoom>", "<crop>", "</crop>", "[", "]", ",", " ", "\n", "-", "7", "12",
                                 "x"]), max_size=40).map("".join))
def test_parse_call_reads_every_call_the_old_pattern_read(text):
    m = _QUADRATIC.search(text)
    assert parse_call(text) == (tuple(int(v) for v in m.groups()[1:]) if m else None)


def test_parse_call_is_linear_in_the_turns_length():
    # 50,000 spaces after `<zoom>` took the old pattern over a minute (quadratic), holding the GIL past the
    # turn's time limit; a child process with a generous deadline tells a hang from an answer
    code = ("from mmrlvr.data.zoom import parse_call; "
            "assert parse_call('<zoom>' + ' ' * 50000) is None; "
            "assert parse_call('<zoom>[1, 2, 3, 4' + ' ' * 50000 + ']' + ' ' * 50000 + '</zoom>') == (1, 2, 3, 4)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)


def test_box_problem_and_zoom_size_by_hand():
    assert box_problem((0, 0, 448, 448), (448, 448)) is None
    assert "not inside" in box_problem((0, 0, 449, 10), (448, 448))
    assert "not inside" in box_problem((10, 0, 10, 20), (448, 448))  # x1 == x2
    assert "smaller than 4" in box_problem((0, 0, 3, 20), (448, 448))
    assert zoom_size((0, 0, 112, 112), 12544) == (112, 112)  # already at the limit: kept
    assert zoom_size((0, 0, 56, 28), 12544) == (158, 79)  # sqrt(12544 / 1568) = 2.83
    assert zoom_size((0, 0, 200, 200), 12544) == (200, 200)  # never shrunk below the box
    img = Image.new("RGB", (100, 60))
    img.paste((255, 0, 0), (10, 10, 20, 20))
    crop = zoom(img, (10, 10, 20, 20), 400)
    assert crop.size == (20, 20) and crop.getpixel((10, 10)) == (255, 0, 0)


def test_task_reference_is_the_dots_in_the_box():
    for s in zoom_count.build("train", 40, seed=3, max_dots=4, dot=8, zoomed_share=0.5, flaw_prob=0.0):
        x1, y1, x2, y2 = s.meta["box"]
        crop = s.images[0].crop((x1, y1, x2, y2))
        px = np.asarray(crop).reshape(-1, 3).astype(int)
        red = int(((px[:, 0] > 150) & (px[:, 1] < 120)).sum())
        assert (red > 0) == (s.reference > 0)
        assert red < (s.reference + 1) * 70  # an 8 px dot is about 50 red pixels
        if s.meta.get("zoomed"):
            assert s.target == f"<answer>{s.reference}</answer>" and len(s.images) == 2
        else:
            assert s.target == f"<zoom>{s.meta['box']}</zoom>"
    assert all(not s.meta.get("zoomed") for s in zoom_count.build("eval", 20, seed=3))
    plain = zoom_count.build("train", 20, seed=3, tool=False, flaw_prob=0.0)
    assert all("zoom" not in s.messages[0]["content"][1]["text"] and len(s.images) == 1
               and s.target == f"<answer>{s.reference}</answer>" for s in plain)
    with pytest.raises(ValueError, match="zoom_count: need"):
        zoom_count.build("train", 2, seed=0, region=100)


def test_demo_conversation_is_what_the_episode_renders(tiny):
    """prompt + the zoom call + the tool's message, as the episode builds them token by token,
    is the tokenisation of the warm-start conversation (text and image tokens)."""
    from mmrlvr.data.collate import encode_prompts

    _, processor = tiny
    demo = next(s for s in zoom_count.build("train", 20, seed=1, zoomed_share=0.5) if s.meta.get("zoomed"))
    plain = dataclasses.replace(demo, messages=demo.messages[:1], images=demo.images[:1])
    tok = processor.tokenizer
    prompt = encode_prompts(processor, [plain])["input_ids"][0].tolist()
    call = tok(demo.messages[1]["content"] + "<|im_end|>", add_special_tokens=False)["input_ids"]
    st = EpisodeState(plain, [demo.messages[1]["content"]], max_pixels=12544)
    turn = tools_turn(st)
    inserted = message_tokens(processor, turn.message, turn.images, template_bridge(processor, "<|im_end|>"))
    episode_ids = prompt + call + inserted["input_ids"][0].tolist()
    full = encode_prompts(processor, [demo])
    assert tok.decode(episode_ids) == tok.decode(full["input_ids"][0].tolist())
    assert torch.equal(inserted["pixel_values"], full["pixel_values"][-inserted["pixel_values"].shape[0]:])
