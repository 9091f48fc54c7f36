"""Pure: a chat model's answer text -> the code for the hole (end of turn, thinking, fences, echoes removed).

Each filter is str -> str and runs in this order; the server's post-processing (indentation, repeated suffix
lines, doubled closers, syntax gate) runs after it, as for every prompt format.
1. end of turn: the text stops at the first end-of-turn or end-of-sequence text (the engine already stops at the
   eos ids; a remote server or a chained canvas may still carry one);
2. thinking: a thought channel (`<|channel>thought ... <channel|>`) is dropped, an unclosed one drops the rest;
3. fences: the content of the first fenced block; prose before an opening fence and a lone closing fence go;
4. marker: any echo of the hole marker is removed;
5. prefix echo: the answer restating the code before the hole (from a line start, the cursor's line with or
   without its indentation) loses that restatement;
6. suffix echo: lines of the code after the hole repeated on lines of their own at the end of the answer go.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_OPEN_FENCE = re.compile(r"(?m)^[ \t]*(`{3,}|~{3,})[^\n`]*\n")


def cut_at_end_of_turn(text: str, stops: Iterable[str]) -> str:
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:cut]


def drop_thinking(text: str, open_tag: str | None, close_tag: str | None) -> str:
    if not open_tag or not close_tag:
        return text
    while (start := text.find(open_tag)) >= 0:
        end = text.find(close_tag, start + len(open_tag))
        text = text[:start] if end < 0 else text[:start] + text[end + len(close_tag):]
    return text


def unfence(text: str) -> str:
    """The content of the first fenced block (up to its closing fence or the end), else the text before a lone
    closing fence, else the text."""
    m = _OPEN_FENCE.search(text)
    if m is not None:
        fence = m.group(1)
        body = text[m.end():]
        close = re.search(rf"(?m)^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", body)
        if close is not None:
            body = body[:close.start()]
        return body.removesuffix("\n")
    lone = re.search(r"(?m)^[ \t]*(`{3,}|~{3,})[ \t]*$", text)
    if lone is not None:
        return text[:lone.start()].removesuffix("\n")
    return text


def drop_marker(text: str, marker: str) -> str:
    return text.replace(marker, "") if marker else text


def drop_prefix_echo(text: str, prefix: str) -> str:
    """Remove the longest restatement of the end of `prefix` that starts the answer: prefix[p:] for each line start
    p, and the cursor's line without its indentation. Only restatements with a non-blank character count."""
    if not prefix or not text:
        return text
    candidates = [prefix[m.end():] for m in re.finditer(r"(?:^|\n)", prefix)]
    candidates.append(candidates[-1].lstrip(" \t"))
    best = max((c for c in candidates if c.strip() and text.startswith(c)), key=len, default="")
    return text[len(best):]


def drop_suffix_echo(text: str, suffix: str) -> str:
    """Remove the longest run of leading lines of `suffix` that ends the answer on a line of its own (trailing
    blanks ignored): "x)" before the suffix ")" stays, "a\nprint(x)" before "\nprint(x)" loses its last line."""
    if not suffix or not text:
        return text
    lines = suffix.split("\n")
    body = text.rstrip()
    for n in range(len(lines), 0, -1):
        head = "\n".join(lines[:n]).rstrip()
        if not head.strip() or not body.endswith(head):
            continue
        rest = body[: len(body) - len(head)]
        if head.startswith("\n") or not rest or rest.endswith("\n"):
            return rest
    return text


def clean_answer(text: str, *, stops: Iterable[str] = (), thinking: tuple[str | None, str | None] = (None, None),
                 marker: str = "", prefix: str = "", suffix: str = "") -> str:
    """All the filters above, in order."""
    text = cut_at_end_of_turn(text, stops)
    text = drop_thinking(text, *thinking)
    text = unfence(text)
    text = drop_marker(text, marker)
    text = drop_prefix_echo(text, prefix)
    return drop_suffix_echo(text, suffix)
