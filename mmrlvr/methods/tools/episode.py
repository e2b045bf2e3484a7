"""Image tools for episodes: the policy writes `<zoom>[x1, y1, x2, y2]</zoom>` and sees that region
of the prompt's first image, enlarged, in its next turn ("thinking with images").

The box is in the pixel frame of the prompt's image as the task stored it (width x height before
the processor resizes it). It is validated (four integers, x1 < x2, y1 < y2, inside the image, at
least `MIN_SIDE` pixels a side); an invalid box gets a text answer saying why, and the episode goes
on. The crop is enlarged to the largest size within the processor's pixel limit (the same limit
every prompt image has), keeping its aspect ratio, so the region gets more visual tokens than it
had in the whole image. The episode ends when a turn makes no tool call (its answer is scored).
"""

from __future__ import annotations

from mmrlvr.data.zoom import MIN_SIDE, RESULT_TEXT, ZOOM, box_problem, parse_call, zoom, zoom_size  # noqa: F401
from mmrlvr.rollout.episode_registry import EpisodeState, Turn, register_episode


@register_episode("tools")
def tools_turn(state: EpisodeState) -> Turn:
    """After each policy turn: a zoom call -> the enlarged region as a new image; no call -> the end."""
    from mmrlvr.data.media import load_image

    box = parse_call(state.turns[-1])
    if box is None:
        return Turn(end=True, reason="answered")
    if not state.sample.images:
        return Turn({"role": "user", "content": "There is no image to zoom into."})
    image = load_image(state.sample.images[0])
    why = box_problem(box, image.size)
    if why is not None:
        return Turn({"role": "user", "content": f"Invalid zoom: {why}."})
    crop = zoom(image, box, state.max_pixels)
    return Turn({"role": "user", "content": [{"type": "text", "text": RESULT_TEXT.format(box=list(box))},
                                             {"type": "image"}]}, images=(crop,))
