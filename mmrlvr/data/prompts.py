"""Chat messages from a question with image placeholders, and the answer-format instructions.

`<image>`, `<image1>`, `<image2>` ... in a question become the chat template's image slots, in the
order they appear (`<imageK>` is the row's K-th image, `<image>` the next one not yet placed).
Images that no placeholder names go first, before the text, in their row order.
MATH-V convention: a row with ONE image whose question names `<image1>`, `<image2>`, ... stores
all figures in that one composite image, so it fills the first placeholder and the later ones
are removed. Any other placeholder naming an image the row lacks makes the row bad.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mmrlvr.data.io import BadRow

_PLACEHOLDER = re.compile(r"<image(\d{0,3})>")

TEMPLATES = {
    "answer": "Give the final answer inside <answer></answer>.",
    "think": "Think step by step inside <think></think>, then give the final answer inside <answer></answer>.",
    "plain": "",
}


def instruction(template: str) -> str:
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; known: {', '.join(TEMPLATES)}")
    return TEMPLATES[template]


def build_messages(question: str, images: Sequence, suffix: str = "") -> tuple[tuple[dict, ...], tuple]:
    """(messages, images in slot order) for one user turn; raises BadRow on a dangling placeholder."""
    content: list[dict] = []
    slots: list = []
    used: set[int] = set()
    nxt, pos = 0, 0
    pieces: list[tuple[str, int | None]] = []
    found = list(_PLACEHOLDER.finditer(question))
    composite = len(images) == 1 and len(found) > 1 and all(m.group(1) for m in found)
    for m in found:
        if composite and used:  # MATH-V: later panels are inside the one composite image
            pieces.append((question[pos : m.start()], None))
            pos = m.end()
            continue
        pieces.append((question[pos : m.start()], None))
        if composite:
            k = 0
        elif m.group(1):
            k = int(m.group(1)) - 1
        else:
            while nxt in used:
                nxt += 1
            k = nxt
        if not 0 <= k < len(images):
            raise BadRow(f"question names {m.group(0)} but the row has {len(images)} image(s)")
        used.add(k)
        pieces.append(("", k))
        pos = m.end()
    pieces.append((question[pos:], None))
    for j, img in enumerate(images):  # images no placeholder names: first
        if j not in used:
            content.append({"type": "image"})
            slots.append(img)
    for text, k in pieces:
        if k is not None:
            content.append({"type": "image"})
            slots.append(images[k])
        elif text.strip():
            content.append({"type": "text", "text": text.strip()})
    if suffix:
        has_text = any(c["type"] == "text" for c in content)
        content.append({"type": "text", "text": ("\n" if has_text else "") + suffix})
    return ({"role": "user", "content": content},), tuple(slots)


# --- the user's own prompt ------------------------------------------------------------------
# Three ways, first match wins: a `prompt` column (the row's whole user text, as in TRL), a
# Jinja template file (`task.args.prompt_template`, as EasyR1's `format_prompt`) rendered with
# the sample's fields, else the task's default text (byte-identical to the shipped prompts).
# `system_prompt` adds a system turn in front of any of them.

NEEDS_TAGS = {"count": ("<answer>",), "format": ("<think>", "<answer>")}  # verifiers that need exact tags


@dataclass(frozen=True)
class PromptSpec:
    """How a task words its user turn: a shipped instruction, or the user's template and system prompt."""

    template: str = "answer"  # answer | think | plain: the shipped answer-format instruction
    text: str | None = None  # Jinja source of the user's template (None: the task's default)
    path: str = ""  # where `text` came from, for messages
    system: str | None = None  # a system turn before the user turn

    def render(self, fields: dict) -> str:
        """The user text from the template and a sample's fields; BadRow names a missing field, a
        failing expression or a passed bound (`mmrlvr.data.template_render`)."""
        from mmrlvr.data.template_render import render_template

        return render_template(self.text, self.path, fields)


def prompt_spec(template: str = "answer", prompt_template: str | None = None, system_prompt: str | None = None) -> PromptSpec:
    """Validate the prompt arguments of a task (before any row is read) into a `PromptSpec`."""
    instruction(template)
    text = None
    if prompt_template is not None:
        if not isinstance(prompt_template, str):
            raise ValueError(f"task.args.prompt_template {prompt_template!r}: expected the path of a Jinja template")
        path = Path(prompt_template).expanduser()
        if not path.is_file():
            raise ValueError(f"task.args.prompt_template {prompt_template!r}: file not found (a Jinja template)")
        text = path.read_text(encoding="utf-8")
        import jinja2
        from jinja2.sandbox import SandboxedEnvironment

        try:
            SandboxedEnvironment().parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"task.args.prompt_template {prompt_template}:{exc.lineno}: {exc.message}") from None
        except RecursionError:  # jinja2's parser recurses once per nested bracket
            raise ValueError(f"task.args.prompt_template {prompt_template}: nested too deeply to parse") from None
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ValueError(f"task.args.system_prompt {system_prompt!r}: expected text")
    return PromptSpec(template, text, str(prompt_template or ""), system_prompt or None)


def missing_tags(text: str, verifiers) -> list[str]:
    """'verifier needs <tag>' for each verifier whose exact tags the template never asks for."""
    return [f"verifier {v!r} needs {tag}" for v in verifiers for tag in NEEDS_TAGS.get(v, ()) if tag not in text]


def user_messages(spec: PromptSpec, default_text: str, images: Sequence, default_suffix: str, fields: dict,
                  prompt: str | None = None) -> tuple[tuple[dict, ...], tuple]:
    """(messages, images in slot order): the `prompt` column, the template, or the default text."""
    if isinstance(prompt, str) and prompt.strip():
        messages, slots = build_messages(prompt.strip(), images)
    elif spec.text is not None:
        messages, slots = build_messages(spec.render(fields), images)
    else:
        messages, slots = build_messages(default_text, images, default_suffix)
    if spec.system:
        messages = ({"role": "system", "content": [{"type": "text", "text": spec.system}]}, *messages)
    return messages, slots


def prompt_text(sample) -> str:
    """The text turns of a sample's prompt, one per line (images left out), for samples/ and reports."""
    return "\n".join(c["text"].strip() for m in getattr(sample, "messages", ()) for c in m.get("content", ())
                     if isinstance(c, dict) and c.get("type") == "text" and c.get("text", "").strip())


def example_fields(sample) -> dict:
    """What a person needs beside a completion in an eval report: the prompt text and the reference
    (choice references show their option text: "C (12 cm)")."""
    ref, options = sample.reference, (getattr(sample, "meta", None) or {}).get("options") or []
    if isinstance(ref, str) and len(ref) == 1 and options and "A" <= ref <= "J" and ord(ref) - 65 < len(options):
        ref = f"{ref} ({options[ord(ref) - 65]})"
    return {"prompt_text": prompt_text(sample), "reference": ref}


def task_messages(spec: PromptSpec, default: tuple[dict, ...], fields: dict, prompt: str | None = None) -> tuple[dict, ...]:
    """A task's shipped messages with the user's wording: the `prompt` column or the rendered
    template replaces the user turn's question (its last text part); image/video slots stay where
    the task puts them. With neither, `default` is returned as is (plus the system turn)."""
    text = prompt.strip() if isinstance(prompt, str) and prompt.strip() else (spec.render(fields) if spec.text is not None else None)
    messages = default
    if text is not None:
        *head, user = default
        content = list(user["content"])
        last = max((i for i, c in enumerate(content) if c.get("type") == "text"), default=None)
        if last is None:
            content.append({"type": "text", "text": text})
        else:
            content[last] = {"type": "text", "text": text}
        messages = (*head, {**user, "content": content})
    if spec.system:
        messages = ({"role": "system", "content": [{"type": "text", "text": spec.system}]}, *messages)
    return messages
