"""Tools (`rollout.episode: tools`): the policy may call the zoom tool, `<zoom>x1,y1,x2,y2</zoom>`,
and gets the crop of its own image back as the next turn's image.

The whole method is its episode: the turn function in episode.py, registered as the episode
`tools` when its record (`method.py`) is imported (the crop itself is `mmrlvr.data.zoom`: the tool's argument
is model text, parsed by a bounded pattern, never run). It fills no recipe hook.
Docs: explanation/episodes.md.
"""
