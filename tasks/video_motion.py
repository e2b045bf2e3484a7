"""Synthetic motion: "Which way does the red square move?" over a short generated clip.

Each clip is `frames` (default 4) frames of 56x56 (one merged visual token per 28x28 cell, two frames per
temporal patch): a red square moves left, right, up or down, a static square of another colour
distracts. Up and down (and left and right) differ only in the order of the frames, so the
answer needs time, not just appearance: exactly what temporal contrast (shuffled frames) tests.

Clips are rendered when their batch is encoded (`MovingSquare.load`), so a 4096-prompt task costs
4096 small records. The teacher of the warm start is flawed on purpose: on clips moving up it
answers "down" with probability `flaw_prob`; RL against the `choice` verifier corrects it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from mmrlvr.data.media import DEFAULT_FPS
from mmrlvr.data.prompts import prompt_spec, task_messages
from mmrlvr.types import Sample

MEDIA = ("video",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('choice',)  # what its samples are scored by (each sample's own verifier)

DIRECTIONS = ("left", "right", "up", "down")
STEP = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
SIZE, SQUARE = 56, 20
ASK, ANSWER_FORMAT = "Which way does the red square move: left, right, up or down?", "Answer as <answer>direction</answer>."
QUESTION = f"{ASK} {ANSWER_FORMAT}"
FIELDS = {"question": ASK, "answer_format": ANSWER_FORMAT, "options": list(DIRECTIONS)}  # what a prompt_template sees


@dataclass(frozen=True)
class MovingSquare:
    """A clip described by a few numbers; `load()` renders its frames (the lazy media contract)."""

    direction: str
    start: tuple[int, int]  # top-left (row, col) of the red square in the first frame
    speed: int  # pixels per frame
    frames: int
    distractor: tuple[int, int, int, int, int]  # row, col, r, g, b of the static square

    def positions(self) -> list[tuple[int, int]]:
        dr, dc = STEP[self.direction]
        return [(self.start[0] + dr * self.speed * t, self.start[1] + dc * self.speed * t) for t in range(self.frames)]

    def load(self, max_frames: int | None = None, max_pixels: int | None = None):
        out = np.full((self.frames, SIZE, SIZE, 3), 235, np.uint8)
        r0, c0, *rgb = self.distractor
        for t, (r, c) in enumerate(self.positions()):
            out[t, r0 : r0 + SQUARE, c0 : c0 + SQUARE] = rgb
            out[t, r : r + SQUARE, c : c + SQUARE] = (220, 40, 40)
        from mmrlvr.data.media import decode_video

        return decode_video(out, max_frames=max_frames, max_pixels=max_pixels)


def _clip(rng: random.Random, frames: int) -> MovingSquare:
    direction = rng.choice(DIRECTIONS)
    speed = rng.randint(6, 8) if frames <= 4 else rng.randint(2, 4)
    travel = speed * (frames - 1)
    lo, hi = 0, SIZE - SQUARE - travel
    along = rng.randint(lo, max(lo, hi))
    across = rng.randint(0, SIZE - SQUARE)
    dr, dc = STEP[direction]
    start_along = along if (dr + dc) > 0 else along + travel
    start = (start_along, across) if dr else (across, start_along)
    color = rng.choice([(40, 80, 220), (40, 170, 60), (230, 200, 30)])
    distractor = (rng.randint(0, SIZE - SQUARE), rng.randint(0, SIZE - SQUARE), *color)
    return MovingSquare(direction, start, speed, frames, distractor)


def build(split: str, size: int, seed: int, frames: int = 4, flaw_prob: float = 0.7,
          eval_size: int = 256, prompt_template: str | None = None, system_prompt: str | None = None) -> list[Sample]:
    """Samples for "train" or "eval"; eval clips are drawn first and never appear in train."""
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    spec = prompt_spec("answer", prompt_template, system_prompt)  # validate before drawing
    messages = task_messages(spec, ({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": QUESTION}]},), FIELDS)
    eval_rng = random.Random(f"video_motion-eval-{seed}")
    held = [_clip(eval_rng, frames) for _ in range(size if split == "eval" else eval_size)]
    if split == "eval":
        clips, rng = held, eval_rng
    else:
        rng, seen, clips = random.Random(f"video_motion-train-{seed}"), set(held), []
        while len(clips) < size:
            clip = _clip(rng, frames)
            if clip not in seen:
                clips.append(clip)
    samples = []
    for i, clip in enumerate(clips):
        teacher = "down" if clip.direction == "up" and rng.random() < flaw_prob else clip.direction
        samples.append(Sample(
            id=f"video_motion-{split}-{seed}-{i}",
            messages=messages,
            reference="ABCD"[DIRECTIONS.index(clip.direction)],
            verifier="choice",
            videos=(clip,),
            meta={"options": list(DIRECTIONS), "direction": clip.direction, "teacher": teacher, "video_fps": DEFAULT_FPS},
            target=f"<answer>{teacher}</answer>",
        ))
    return samples
