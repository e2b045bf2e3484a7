"""`fenced_blocks` (docs/gen_reference.py) finds the code blocks the runnable test runs and the
marker expansion skips: property-tested on generated Markdown, nested fences included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from .conftest import load_docs_module

gen = load_docs_module("gen_reference")

words = st.text(alphabet="abcdefghij :=-.#<>!", min_size=1, max_size=30).filter(lambda t: t.strip() and not t.lstrip().startswith(("#", "<!--")))
paragraph = st.lists(words, min_size=1, max_size=3).map(lambda ls: ("text", "\n".join(l.strip() for l in ls)))


@st.composite
def block(draw):
    char = draw(st.sampled_from("`~"))
    n = draw(st.integers(3, 5))
    info = draw(st.sampled_from(["", "yaml", "bash", "python title=\"x.py\""]))
    body = draw(st.lists(words, max_size=4))
    if n > 3 and draw(st.booleans()):  # a shorter fence inside is body, not a close
        body = [*body, char * 3 + "yaml", "a: 1", char * 3]
    marked = draw(st.booleans())
    return ("block", char * n, info, "\n".join(body), marked)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(paragraph, block()), max_size=6))
def test_fenced_blocks_recovers_every_block(segments):
    parts, expected = [], []
    for seg in segments:
        if seg[0] == "text":
            parts.append(seg[1])
            continue
        _, fence, info, body, marked = seg
        text = ("<!-- runnable -->\n" if marked else "") + f"{fence}{info}\n" + (body + "\n" if body else "") + fence
        parts.append(text)
        expected.append((info, body, marked))
    md = "\n\n".join(parts) + "\n"
    got = [(b["info"], b["body"], b["before"] == "<!-- runnable -->") for b in gen.fenced_blocks(md)]
    assert got == expected


def test_a_marker_inside_a_code_block_is_left_alone():
    md = "````markdown\n<!-- reference:no-such-block -->\n````\n"
    assert gen.expand(md) == md  # outside a block this name would raise: unknown generated block
