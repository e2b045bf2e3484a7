"""Text from a data row or a model stays text when it is put into a prompt.

A prompt is rendered by the chat template to one string and then tokenised, and the tokeniser reads
every spelling of a special token in that string as the token itself. So a question, an Observer's
caption, a hint, a refine turn or a tool reply that *spells* `<|image_pad|>` (ordinary tokens can) would
become a real vision token (the processor then counts one image too many), and one that spells
`<|im_start|>assistant` would forge a turn. Every text part of a message is made literal before
rendering: each spelled special token gets a word joiner (U+2060, invisible, no meaning to a reader)
after its first character, so the tokeniser reads ordinary tokens there. Text that spells no special
token is returned unchanged, so ordinary prompts tokenise exactly as before.

Which strings are special comes from the tokenizer itself (its special and special-added tokens, the
media tokens of every family included), never from a list of our own.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

BREAK = "\u2060"  # WORD JOINER: zero width, not whitespace; no tokenizer here normalises it away


def special_strings(tokenizer) -> tuple[str, ...]:
    """Every string `tokenizer` reads as one special token (role markers, media tokens, eos, pad)."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)  # a processor: its tokenizer
    found = set(getattr(tok, "all_special_tokens", ()) or ())
    found |= {t.content for t in getattr(tok, "added_tokens_decoder", {}).values() if getattr(t, "special", False)}
    return tuple(sorted((s for s in found if isinstance(s, str) and len(s) > 1), key=len, reverse=True))


@functools.lru_cache(maxsize=32)
def _pattern(specials: tuple[str, ...]) -> re.Pattern | None:
    return re.compile("|".join(re.escape(s) for s in specials)) if specials else None


def literal(text: str, specials: tuple[str, ...]) -> str:
    """`text` with every spelled special token broken after its first character (unchanged if none)."""
    pattern = _pattern(specials)
    if pattern is None or not isinstance(text, str):
        return text
    return pattern.sub(lambda m: m.group(0)[0] + BREAK + m.group(0)[1:], text)


def spelled_specials(text: str, specials: tuple[str, ...]) -> list[str]:
    """The special tokens `text` spells, in order (empty: the text is safe as it is)."""
    pattern = _pattern(specials)
    return pattern.findall(text) if pattern is not None and isinstance(text, str) else []


def literal_message(message: dict, specials: tuple[str, ...]) -> dict:
    """A chat message whose text (a string, or the `text` of each text part) is literal."""
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": literal(content, specials)}
    if isinstance(content, (list, tuple)):
        parts = [{**p, "text": literal(p["text"], specials)} if isinstance(p, dict) and isinstance(p.get("text"), str)
                 else p for p in content]
        return {**message, "content": parts}
    return message


def literal_messages(messages: Sequence[dict], tokenizer) -> list[dict]:
    """`messages` with every text part literal for `tokenizer` (media parts untouched)."""
    specials = special_strings(tokenizer)
    return [literal_message(m, specials) for m in messages]


_PIPE_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>")  # `<|im_start|>`, `<|image_pad|>`: the Qwen/ChatML spelling


@functools.lru_cache(maxsize=1)
def row_specials() -> tuple[str, ...]:
    """Special tokens a data row must not spell, before any tokenizer is loaded: every registered
    family's media tokens and end-of-turn token (`<image>`, `<start_of_image>`, `<end_of_turn>`, ...)."""
    from mmrlvr.models.family_spec import family_specs

    found = {t for spec in family_specs() for t in (*spec.adapter.media_tokens, spec.adapter.turn_end)}
    found |= {"<start_of_turn>", "<|im_start|>"}  # the turn starts of the families whose ends are above
    return tuple(sorted(found, key=len, reverse=True))


def forged_in_sample(sample) -> str | None:
    """The first special token a sample's prompt or demonstration text spells, or None.

    A data row that spells one is a bad row (skipped and named like a missing answer): its text would be
    made literal at encoding anyway, but a question that names `<image>` is almost surely a broken export."""
    specials = row_specials()
    texts = [getattr(sample, "target", None) or ""]
    for message in getattr(sample, "messages", ()) or ():
        content = message.get("content") if isinstance(message, dict) else None
        texts += [content] if isinstance(content, str) else [
            p.get("text") for p in content or () if isinstance(p, dict) and isinstance(p.get("text"), str)]
    for text in texts:
        found = _PIPE_TOKEN.findall(text) + spelled_specials(text, specials)
        if found:
            return found[0]
    return None
