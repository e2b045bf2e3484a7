"""Peers' grounding and temporal rewards, re-stated rule for rule so our `iou` and `tiou` can be held to
them without installing their training code (each imports torch, trl and a model at module level).

Each function returns the peer's score, or None where the peer reads no box or segment at all (it then
pays 0). The source of every rule is cited by repository, commit, file and line; see NOTICE for the
licences. Nothing here is called by mmrlvr itself.
"""

from __future__ import annotations

import json
import re

VLM_R1 = {"repo": "https://github.com/om-ai-lab/VLM-R1", "commit": "90052f478646e38bc67363862f699b7afca6b337",
          "path": "src/open-r1-multimodal/src/open_r1/vlm_modules/qwen_module.py", "lines": "108-161",
          "function": "Qwen2VLModule.iou_reward (the accuracy reward grpo_rec.py uses for REC)",
          "licence": "Apache-2.0 (repository LICENSE)"}
TIMEZERO = {"repo": "https://github.com/www-Ye/TimeZero", "commit": "a7c3523367cbff9f166baae10bc34568cffc26f3",
            "path": "src/open_r1/grpo_video.py", "lines": "77-121",
            "function": "parse_timestamp_output and iou_timestamp_reward",
            "licence": "Apache-2.0 (repository LICENSE.txt and the file's header)"}
TEMPORAL_R1 = {"repo": "https://github.com/appletea233/Temporal-R1", "commit": "f364f6c837db5b07c6cad17dbfb99a888bb4d151",
               "path": "verl/utils/reward_score/tvg.py", "lines": "4-10, 18-39",
               "function": "temporal_iou and tvg_accuracy_reward",
               "licence": "Apache-2.0 (repository LICENSE)"}

# qwen_module.py:134-135 - the answer tag (case-sensitive, lazy, the FIRST tag: re.search at :150) and the
# box: four unsigned integers, no blank after "[" or before a comma, "]" right after the fourth.
_VLM_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_VLM_BOX = re.compile(r"\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)]")


def vlm_r1_pixel_iou(box1: list[float], box2: list[float]) -> float:
    """qwen_module.py:114-124: the intersection counts pixels inclusively (`-1` then `+1`), so an overlap
    of one pixel or less is none, while the areas are plain products. Raises ZeroDivisionError on an empty
    union, as the peer does (its caller catches it and pays 0)."""
    inter_x1 = max(box1[0], box2[0])
    inter_y1 = max(box1[1], box2[1])
    inter_x2 = min(box1[2] - 1, box2[2] - 1)
    inter_y2 = min(box1[3] - 1, box2[3] - 1)
    if inter_x1 < inter_x2 and inter_y1 < inter_y2:
        inter = (inter_x2 - inter_x1 + 1) * (inter_y2 - inter_y1 + 1)
    else:
        inter = 0
    union = (box1[2] - box1[0]) * (box1[3] - box1[1]) + (box2[2] - box2[0]) * (box2[3] - box2[1]) - inter
    return float(inter) / union


def vlm_r1_iou_reward(content: str, sol: list[float], input_size: list[int], image_size: list[int]) -> float | None:
    """qwen_module.py:149-161: the first box of the first answer tag, integers, scaled from the model's
    input size (`image_grid_thw * 14`, :142-143) to the image's (`resize_bbox`, :125-130), then the IoU
    above; any exception pays 0 (:160-161). None: no tag or no box in it (the peer pays 0)."""
    m = _VLM_ANSWER.search(content)
    if not m:
        return None
    b = _VLM_BOX.search(m.group(1).strip())
    if not b:
        return None
    (iw, ih), (w, h) = input_size, image_size
    box = [int(b.group(i)) for i in range(1, 5)]
    box = [box[0] / iw * w, box[1] / ih * h, box[2] / iw * w, box[3] / ih * h]
    try:
        return vlm_r1_pixel_iou(box, sol)
    except Exception:  # noqa: BLE001 - the peer's own `except Exception: pass`
        return 0.0


# grpo_video.py:80 (every tag, the LAST one used at :86) and :89: "s to e" or "s and e", one blank each side,
# unsigned numbers, the LAST such pair in the tag (:92).
_TZ_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_TZ_SEGMENT = re.compile(r"(\d+\.?\d*) (to|and) (\d+\.?\d*)", re.IGNORECASE)


def timezero_reward(content: str, gt: list[float]) -> float | None:
    """grpo_video.py:97-121 with the ground truth in seconds (its `s, e = gt_start, gt_end`, :110). The
    peer leaves `iou` unbound when the union is empty (a NameError in training); the reference here always
    has a length, so the union never is. None: no tag, or no pair in the last one."""
    tags = _TZ_ANSWER.findall(content)
    if not tags:
        return None
    pairs = _TZ_SEGMENT.findall(tags[-1])
    if not pairs:
        return None
    start, end = float(pairs[-1][0]), float(pairs[-1][2])
    s, e = gt
    intersection = max(0, min(end, e) - max(start, s))
    union = max(end, e) - min(start, s)
    return intersection / union


def temporal_r1_iou(a: list[float], b: list[float]) -> float:
    """tvg.py:4-10."""
    max0, min0 = max(a[0], b[0]), min(a[0], b[0])
    max1, min1 = max(a[1], b[1]), min(a[1], b[1])
    return max(0, max(min1 - max0, 0) / (max1 - min0))


def temporal_r1_reward(content: str, gt: list[float], video_length: float = 1.0) -> float | None:
    """tvg.py:18-39: the FIRST answer tag (re.search), its whole stripped content as JSON, `float` of its
    "start_time" and "end_time" divided by the video length (1 here: our references are in seconds, so the
    ground truth is too). None where any step raises (the peer pays 0)."""
    try:
        m = re.search(r"<answer>(.*?)</answer>", content, re.DOTALL)
        data = json.loads(m.group(1).strip())
        pred = [float(data["start_time"]) / video_length, float(data["end_time"]) / video_length]
        return temporal_r1_iou(pred, gt)
    except Exception:  # noqa: BLE001 - the peer's own `except Exception: pass`
        return None
