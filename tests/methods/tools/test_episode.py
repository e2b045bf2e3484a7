"""The `tools` episode's turn: a zoom call gets the crop of the prompt's image back, an answer ends the
episode, a box outside the image gets the tool's error text and no image (the parsing and the crop:
tests/tasks/test_zoom_count.py)."""

from __future__ import annotations

import dataclasses

from mmrlvr.methods.tools.episode import tools_turn
from mmrlvr.rollout.episodes import EpisodeState
from mmrlvr.tasks import zoom_count


def test_tools_turn_answers():
    s = zoom_count.build("eval", 1, seed=0)[0]
    st = EpisodeState(s, [f"<zoom>{s.meta['box']}</zoom>"], max_pixels=12544)
    t = tools_turn(st)
    assert len(t.images) == 1 and t.images[0].size == (112, 112) and not t.end
    assert tools_turn(dataclasses.replace(st, turns=["<answer>2</answer>"])).reason == "answered"
    bad = tools_turn(dataclasses.replace(st, turns=["<zoom>[0, 0, 999, 10]</zoom>"]))
    assert "Invalid zoom" in bad.message["content"] and not bad.images
