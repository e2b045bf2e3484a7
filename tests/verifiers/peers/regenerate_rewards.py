"""Regenerate `grounding_cases.json` and `temporal_cases.json`: boxes and segments as models write them,
each with the score VLM-R1's `iou_reward` (boxes), TimeZero's and Temporal-R1's rewards (segments) give it.

Why: a grounding or temporal reward that reads fewer answers than a peer's wastes rollouts, and one that
pays what the peers refuse can be hacked. The completions are ours (the formats a model writes, malformed
ones, degenerate and out-of-image boxes); the scores come from `rewards.py`, the peers' rules re-stated
with file and line, so `test_grounding_peer.py` and `test_temporal_peer.py` can hold ours to them.

    python tests/verifiers/peers/regenerate_rewards.py [--check]

`--check` writes nothing and fails when a stored file differs from what this script makes now.
`--against VLM-R1 TimeZero Temporal-R1` (three checkouts: work trees or bare git directories) takes the
peers' own reward functions out of their files (only those functions, never their modules), runs them on
every case and fails unless `rewards.py` gives the same score: the re-statement is checked, not trusted.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests.` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.verifiers.peers.rewards import (TEMPORAL_R1, TIMEZERO, VLM_R1, temporal_r1_reward, timezero_reward,
                                           vlm_r1_iou_reward)

HERE = Path(__file__).resolve().parent
GROUNDING = HERE / "grounding_cases.json"
TEMPORAL = HERE / "temporal_cases.json"
IMAGE = [640, 480]
REF = [100, 100, 300, 250]
THINK = "<think>The dog sits left of the sofa.</think>"

# (id, completion, reference, input size the model saw: None = the image's own)
BOXES = [
    ("list_in_tag", f"{THINK}<answer>[100, 100, 300, 250]</answer>", REF, None),
    ("list_no_blanks", "<answer>[120,110,310,260]</answer>", REF, None),
    ("list_partial_overlap", "<answer>[150, 120, 330, 280]</answer>", REF, None),
    ("json_bbox_2d", '<answer>{"bbox_2d": [110, 90, 290, 240], "label": "dog"}</answer>', REF, None),
    ("json_list_of_objects", '<answer>[{"bbox_2d": [110, 90, 290, 240], "label": "dog"}]</answer>', REF, None),
    ("json_bbox_key", '<answer>{"bbox": [90, 100, 300, 260]}</answer>', REF, None),
    ("json_fenced", '<answer>```json\n[{"bbox_2d": [105, 95, 295, 255], "label": "dog"}]\n```</answer>', REF, None),
    ("box_in_prose", "<answer>The dog is at [150, 120, 330, 280] in the image.</answer>", REF, None),
    ("box_then_text", "<answer>[100,100,300,250] is the dog</answer>", REF, None),
    ("think_box_ignored", "<think>first guess [0, 0, 10, 10]</think><answer>[100, 100, 300, 250]</answer>", REF, None),
    ("same_box_twice_in_tags", "<answer>[100, 100, 300, 250]</answer> so <answer>[100, 100, 300, 250]</answer>", REF, None),
    ("resized_from_input", "<answer>[101, 99, 302, 248]</answer>", REF, [644, 476]),
    ("resized_json", '<answer>{"bbox_2d": [200, 150, 600, 400]}</answer>', [190, 160, 620, 420], [1288, 952]),
    ("partly_outside_image", "<answer>[500, 400, 700, 600]</answer>", [450, 350, 640, 480], None),
    ("disjoint", "<answer>[400, 300, 500, 400]</answer>", REF, None),
    ("zero_width", "<answer>[100, 100, 100, 250]</answer>", REF, None),
    ("inverted", "<answer>[300, 250, 100, 100]</answer>", REF, None),
    ("three_numbers", "<answer>[100, 100, 300]</answer>", REF, None),
    ("five_numbers", "<answer>[100, 100, 300, 250, 7]</answer>", REF, None),
    ("unclosed_list", "<answer>[100, 100, 300, 250</answer>", REF, None),
    ("empty_tag", "<answer></answer>", REF, None),
    ("prose_only", "<answer>I cannot see a dog.</answer>", REF, None),
    ("no_tag_prose", "There is no dog here.", REF, None),
    ("one_pixel_overlap", "<answer>[0, 100, 101, 250]</answer>", REF, None),
    ("decimals", "<answer>[100.5, 100.0, 300.2, 250.7]</answer>", REF, None),
    ("blank_inside_brackets", "<answer>[ 100, 100, 300, 250 ]</answer>", REF, None),
    ("blank_before_comma", "<answer>[100 , 100 , 300 , 250]</answer>", REF, None),
    ("negative_coordinate", "<answer>[-10, 100, 300, 250]</answer>", REF, None),
    ("corner_pairs", "<answer>(100, 100), (300, 250)</answer>", REF, None),
    ("qwen_box_tokens", "<answer><|box_start|>(100,100),(300,250)<|box_end|></answer>", REF, None),
    ("upper_case_tag", "<ANSWER>[100, 100, 300, 250]</ANSWER>", REF, None),
    ("bare_box_no_tag", "[100, 100, 300, 250]", REF, None),
    ("two_boxes_in_tag", "<answer>[100, 100, 300, 250], [0, 0, 50, 50]</answer>", REF, None),
    ("two_tags_differ", "<answer>[100, 100, 300, 250]</answer> or <answer>[0, 0, 50, 50]</answer>", REF, None),
    ("far_outside_image", "<answer>[0, 0, 5000, 5000]</answer>", REF, None),
]

SEG = [2.5, 7.0]
START_END = '{{"start_time": "{}", "end_time": "{}"}}'
# (id, completion, reference in seconds)
SEGMENTS = [
    ("to_in_tag", f"{THINK}<answer>2.5 to 7.0</answer>", SEG),
    ("from_to_seconds", "<answer>from 3 to 8 seconds</answer>", SEG),
    ("sentence_from_to", "<answer>The dog barks from 4 to 9 seconds.</answer>", SEG),
    ("between_and", "<answer>between 2.5 and 7.0 seconds</answer>", SEG),
    ("json_strings", f"{THINK}<answer>{START_END.format(2.5, 7.0)}</answer>", SEG),
    ("json_numbers", '<answer>{"start_time": 3, "end_time": 8}</answer>', SEG),
    ("json_partial_overlap", f"<answer>{START_END.format(5.0, 10.0)}</answer>", SEG),
    ("json_extra_key", '<answer>{"start_time": "2.5", "end_time": "7.0", "confidence": 0.9}</answer>', SEG),
    ("json_end_first", '<answer>{"end_time": "7.0", "start_time": "2.5"}</answer>', SEG),
    ("json_reversed", f"<answer>{START_END.format(7.0, 2.5)}</answer>", SEG),
    ("json_missing_end", '<answer>{"start_time": "2.5"}</answer>', SEG),
    ("json_not_numbers", '<answer>{"start_time": "soon", "end_time": "later"}</answer>', SEG),
    ("json_first_of_two_tags", f"<answer>{START_END.format(1, 2)}</answer> no, <answer>{START_END.format(2.5, 7.0)}</answer>", SEG),
    ("json_fenced", f"<answer>```json\n{START_END.format(2.5, 7.0)}\n```</answer>", SEG),
    ("json_with_unit", '<answer>{"start_time": "2.5s", "end_time": "7.0s"}</answer>', SEG),
    ("list", "<answer>[3.0, 6.0]</answer>", SEG),
    ("dash_with_units", "<answer>2.5s - 7.0s</answer>", SEG),
    ("comma_pair", "<answer>2.5, 7.0</answer>", SEG),
    ("no_tag_sentence", "The event happens from 2.5 to 7.0 seconds.", SEG),
    ("double_blanks", "<answer>2.5  to  7.0</answer>", SEG),
    ("reversed_to", "<answer>7.0 to 2.5</answer>", SEG),
    ("disjoint", "<answer>8 to 12</answer>", SEG),
    ("two_segments", "<answer>1 to 2, then 2.5 to 7.0</answer>", SEG),
    ("clock_times", "<answer>00:02 to 00:07</answer>", SEG),
    ("negative_start", "<answer>-1 to 7</answer>", SEG),
    ("one_time_only", "<answer>at 4.5 seconds</answer>", SEG),
    ("prose_only", "<answer>the dog never barks</answer>", SEG),
    ("empty_tag", "<answer></answer>", SEG),
]


def grounding_cases() -> dict:
    cases = []
    for cid, text, ref, seen in BOXES:
        meta = {"image_size": IMAGE, "input_size": seen or IMAGE, "box_format": "absolute"}
        cases.append({"id": cid, "completion": text, "reference": ref, "meta": meta,
                      "peers": {"VLM-R1": vlm_r1_iou_reward(text, ref, meta["input_size"], IMAGE)}})
    return {"source": {"VLM-R1": VLM_R1, "regenerate": "python tests/verifiers/peers/regenerate_rewards.py",
                       "note": "completions written here; the peer's score from rewards.py (None: it reads no box, pays 0)"},
            "cases": cases}


def temporal_cases() -> dict:
    cases = [{"id": cid, "completion": text, "reference": ref,
              "peers": {"TimeZero": timezero_reward(text, ref), "Temporal-R1": temporal_r1_reward(text, ref)}}
             for cid, text, ref in SEGMENTS]
    return {"source": {"TimeZero": TIMEZERO, "Temporal-R1": TEMPORAL_R1,
                       "regenerate": "python tests/verifiers/peers/regenerate_rewards.py",
                       "note": "completions written here; each peer's score from rewards.py (None: it reads no segment, pays 0)"},
            "cases": cases}


def _peer_functions(checkout: Path, rel: str, names: tuple[str, ...], scope: dict) -> dict:
    """The named functions of one peer file, defined from their own source in `scope` (the file's other
    top-level code, its imports of torch, trl or a model included, is never run)."""
    bare = not (checkout / rel).is_file()
    src = (subprocess.run(["git", "--git-dir", str(checkout), "show", f"HEAD:{rel}"], check=True, capture_output=True,
                          text=True).stdout if bare else (checkout / rel).read_text())
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            exec(textwrap.dedent(ast.get_source_segment(src, node, padded=True)), scope)  # noqa: S102 - the peer's rule itself
    return scope


def against(vlm_r1: Path, timezero: Path, temporal_r1: Path) -> list[str]:
    """Ids of the cases where a peer's own function and `rewards.py` disagree."""
    import datetime
    import os
    import re

    from PIL import Image

    base = {"re": re, "json": json, "os": os, "datetime": datetime.datetime, "Image": Image}
    vlm = _peer_functions(vlm_r1, VLM_R1["path"], ("iou_reward",), dict(base))["iou_reward"]
    tz = _peer_functions(timezero, TIMEZERO["path"], ("parse_timestamp_output", "iou_timestamp_reward"), dict(base))
    tr1 = _peer_functions(temporal_r1, TEMPORAL_R1["path"], ("temporal_iou", "tvg_accuracy_reward"), dict(base))
    wrong = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        for c in grounding_cases()["cases"]:
            seen, image = c["meta"]["input_size"], c["meta"]["image_size"]
            if seen == image:  # no scaling: an image the size of a 14-pixel grid gives the same score
                seen = image = [644, 476]
            path = Path(tmp) / f"{image[0]}x{image[1]}.png"
            if not path.exists():
                Image.new("RGB", tuple(image)).save(path)
            got = vlm([[{"content": c["completion"]}]], [f"<answer>{json.dumps(c['reference'])}</answer>"],
                      image_grid_thw=[[1, seen[1] // 14, seen[0] // 14]], image_path=[[str(path)]])[0]
            if abs(got - (c["peers"]["VLM-R1"] or 0.0)) > 1e-9:
                wrong.append(f"grounding:{c['id']}")
        for c in temporal_cases()["cases"]:
            got_tz = tz["iou_timestamp_reward"]([c["completion"]], [c["reference"]], [1.0])[0]
            got_tr1 = tr1["tvg_accuracy_reward"](c["completion"], c["reference"], 1.0)
            if abs(got_tz - (c["peers"]["TimeZero"] or 0.0)) > 1e-9 or abs(got_tr1 - (c["peers"]["Temporal-R1"] or 0.0)) > 1e-9:
                wrong.append(f"temporal:{c['id']}")
    return wrong


def render(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when a stored file differs; write nothing")
    ap.add_argument("--against", nargs=3, type=Path, metavar=("VLM_R1", "TIMEZERO", "TEMPORAL_R1"),
                    help="checkouts of the three peers: their own functions must give the stored scores")
    args = ap.parse_args(argv)
    if args.against:
        wrong = against(*args.against)
        if wrong:
            print(f"rewards.py differs from the peers' own code on {len(wrong)} cases: {wrong}", file=sys.stderr)
            return 1
        print("the peers' own functions give every stored score")
    stale = []
    for path, data in ((GROUNDING, grounding_cases()), (TEMPORAL, temporal_cases())):
        text = render(data)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
            continue
        path.write_text(text)
        print(f"{len(data['cases'])} cases -> {path}")
    if stale:
        print(f"stale: {', '.join(stale)}; run python tests/verifiers/peers/regenerate_rewards.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
