"""Pure: engine fill -> trimmed, re-indented, syntax-checked text, and the LSP items/edits that carry it.

`postprocess` runs small filters in order, each aimed at a known complaint about completion engines:
1. size: at most `hole.max_lines` lines (one for a single-line hole); a block body starts on a new line;
2. indentation: the first line continues the cursor's indentation, later lines are shifted to the hole's
   indent when the model wrote them shallower (block bodies);
3. scope: a line dedented below the hole's indent leaves the hole's scope -- the fill stops there;
4. repeated suffix: trailing fill lines that repeat the lines below the hole are dropped;
5. doubled closers: closing brackets/quotes the user already has after the cursor are not typed twice
   (only when the fill itself has more closers than openers, so `foo(bar())` stays intact);
6. syntax: the syntax gate (dg_lsp.fill.syntax) re-parses a bounded window around the hole with the fill in it (and, for
   Python, the statement around the hole when the window cuts it); a fill that makes it worse is shortened to the
   longest version that passes, or dropped. The window's own parse does not depend on the fill, so the server runs
   it (`prepare_check`) beside the engine.

Every filter reads only the hole's neighbourhood (a few lines, or a bounded piece of a long line), so the time
is the same on a one-line 5 MB file as on a small one; and none depends on time, so the same snapshot, hole and
engine text always give the same answer.
"""

from __future__ import annotations

import re

from lsprotocol import types

from dg_lsp.documents import Encoding, Snapshot
from dg_lsp.fill.holes import Hole, leading_ws
from dg_lsp.fill.syntax import KEYSTROKE_PARSE_BYTES, SyntaxCheck, validate

_CLOSERS = {")": "(", "]": "[", "}": "{"}
_QUOTES = "\"'`"
# How much of the line after (or before) the hole a filter reads: far more than any fill, far less than a long line.
LINE_CAP = 4_096


# ---- filters (each: str -> str) -------------------------------------------------------------------------


def _before(snap: Snapshot, pos: int) -> str:
    """The line's text before `pos` (its last LINE_CAP characters)."""
    return snap.text[max(snap.line_start(pos), pos - LINE_CAP):pos]


def _after(snap: Snapshot, pos: int) -> str:
    """The line's text from `pos` (its first LINE_CAP characters)."""
    return snap.text[pos:min(snap.line_end(pos), pos + LINE_CAP)]


_GARBAGE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]")


def _drop_garbage(fill: str) -> str:
    """Control characters and U+FFFD (a byte-level token cut mid-character) never belong in code: drop them."""
    return _GARBAGE.sub("", fill)


def _limit_lines(hole: Hole, fill: str) -> str:
    lines = fill.split("\n")
    if hole.max_lines <= 1:
        return lines[0]
    keep = hole.max_lines + (1 if not lines[0].strip() else 0)
    return "\n".join(lines[:keep])


def _fix_first_line(snap: Snapshot, hole: Hole, fill: str) -> str:
    """A block body after `{`/`:` starts on a new line; on a blank line the first line gets the hole indent."""
    before = _before(snap, hole.start)
    if hole.kind == "block_body" and before.strip() and not fill.startswith("\n") and fill.strip():
        return "\n" + hole.indent + fill.lstrip(" \t")
    if hole.kind in ("block_body", "statement") and not before.strip() and fill.strip():
        first, sep, rest = fill.partition("\n")
        if first.strip():
            pad = hole.indent[len(before) :] if hole.indent.startswith(before) else ""
            return pad + first.lstrip(" \t") + sep + rest
    return fill


def _reindent(snap: Snapshot, hole: Hole, fill: str) -> str:
    """Block body, or a selection of whole lines, written shallower than the hole's indent (the model dropped a
    level): shift it."""
    lines = fill.split("\n")
    if hole.kind == "selection" and hole.start == snap.line_start(hole.start):
        first = 0  # the selection starts at a line start: every fill line carries its own indent
    elif hole.kind == "block_body":
        first = 1
    else:
        return fill
    body = [ln for ln in lines[first:] if ln.strip()]
    if not body:
        return fill
    have = leading_ws(body[0])
    if len(have) >= len(hole.indent) or not hole.indent.startswith(have):
        return fill
    pad = hole.indent[len(have) :]
    return "\n".join(lines[:first] + [pad + ln if ln.strip() else ln for ln in lines[first:]])


def _cut_scope_overrun(hole: Hole, fill: str) -> str:
    if hole.kind not in ("block_body", "statement", "bracket_expr") or hole.max_lines <= 1:
        return fill
    lines = fill.split("\n")
    for i in range(1, len(lines)):
        if lines[i].strip() and len(leading_ws(lines[i])) < len(hole.indent):
            return "\n".join(lines[:i])
    return fill


def _next_lines(snap: Snapshot, hole: Hole, count: int) -> list[str]:
    """The first `count` non-blank lines after the hole's last line, stripped."""
    text = snap.text
    pos = text.find("\n", hole.end)
    out: list[str] = []
    while pos >= 0 and len(out) < count:
        nxt = text.find("\n", pos + 1)
        line = text[pos + 1 : min(len(text) if nxt < 0 else nxt, pos + 1 + LINE_CAP)].strip()
        if line:
            out.append(line)
        pos = nxt
    return out


def _drop_repeated_suffix(snap: Snapshot, hole: Hole, fill: str) -> str:
    mid_line = bool(_before(snap, hole.start).strip())
    if hole.max_lines <= 1 or (mid_line and "\n" not in fill):
        return fill
    lines = fill.split("\n")
    below = _next_lines(snap, hole, len(lines) + 1)
    # A fill line may repeat what follows only if it starts a line of its own (not the cursor's line tail).
    first = 1 if mid_line else 0
    for i in range(first, len(lines)):
        tail = [ln.strip() for ln in lines[i:] if ln.strip()]
        if not tail or len(tail) > len(below):
            continue
        whole = tail == below[: len(tail)]
        partial = tail[:-1] == below[: len(tail) - 1] and below[len(tail) - 1].startswith(tail[-1])
        if whole or (partial and len(tail) > 1):
            return "\n".join(lines[:i])
    return fill


def _excess_closers(fill: str, tail: str) -> bool:
    """Does `fill` end with closers/quotes in `tail` that it never opened (so they duplicate the suffix)?"""
    for ch in set(tail):
        if ch in _CLOSERS and fill.count(ch) <= fill.count(_CLOSERS[ch]):
            return False
        if ch in _QUOTES and fill.count(ch) % 2 == 0:
            return False
    return True


def _drop_suffix_overlap(snap: Snapshot, hole: Hole, fill: str) -> str:
    rest = _after(snap, hole.end).strip()
    if not rest or not fill.strip():
        return fill
    whole = snap.line_end(hole.end) - hole.end <= LINE_CAP  # `rest` is all the line has
    body = fill.rstrip()
    for k in range(min(len(rest), len(body)), 0, -1):
        tail = rest[:k]
        if not body.endswith(tail):
            continue
        brackety = any(ch in _CLOSERS or ch in _QUOTES for ch in tail)
        if (brackety and _excess_closers(body, tail)) or (not brackety and k == len(rest) and whole):
            return body[: len(body) - k].rstrip(" \t")
    return fill


def _close_block(snap: Snapshot, hole: Hole, fill: str) -> str:
    """`{|}` on one line: a multi-line body must end with a newline so the `}` gets its own line."""
    rest = _after(snap, hole.end)
    fill = fill.rstrip()
    if hole.kind == "block_body" and rest.strip() and "\n" in fill:
        header_indent = leading_ws(_before(snap, hole.start))
        return fill + "\n" + header_indent
    return fill


def postprocess(snap: Snapshot, hole: Hole, fill: str, check: SyntaxCheck | None = None,
                parse_budget: int = KEYSTROKE_PARSE_BYTES) -> str | None:
    """Engine text -> the text to put in the hole, or None when nothing usable is left. `check`: from
    `syntax.prepare_check(snap, hole)` when it was run ahead; `parse_budget`: bytes the syntax gate's search for a
    shorter version may parse."""
    if not fill or not fill.strip():
        return None
    fill = _drop_garbage(fill.replace("\r\n", "\n"))
    fill = _limit_lines(hole, fill)
    fill = _fix_first_line(snap, hole, fill)
    fill = _reindent(snap, hole, fill)
    fill = _cut_scope_overrun(hole, fill)
    fill = _drop_repeated_suffix(snap, hole, fill)
    fill = _drop_suffix_overlap(snap, hole, fill)
    fill = _close_block(snap, hole, fill)
    if not fill.strip():
        return None
    fill = validate(snap, hole, fill, check, parse_budget)
    if fill is not None and "\r\n" in snap.text:
        fill = fill.replace("\n", "\r\n")
    return fill if fill and fill.strip() else None


# ---- LSP converters ----------------------------------------------------------------------------------------


def to_lsp_range(snap: Snapshot, start: int, end: int, encoding: Encoding) -> types.Range:
    return types.Range(start=types.Position(*snap.position_at(start, encoding)),
                       end=types.Position(*snap.position_at(end, encoding)))


def _cursor_line_span(snap: Snapshot, hole: Hole, cursor: int) -> tuple[int, int]:
    """The part of the hole an item may replace: cursor .. end of the replaced text on the cursor's line.

    Ranges of inline/completion items must stay on one line. When the hole goes on past the cursor's line, the
    item may only replace through the line end if everything beyond is whitespace; otherwise it inserts at
    the cursor, so no text the user did not ask to change is ever deleted.
    """
    text = snap.text
    if hole.start != cursor or hole.end <= cursor:
        return cursor, cursor
    line_end = snap.line_end(cursor)
    if hole.end <= line_end:
        return cursor, hole.end
    if text[line_end : hole.end].strip() == "":
        return cursor, line_end
    return cursor, cursor


def lsp_inline_item(
    snap: Snapshot, hole: Hole, cursor_offset: int, fill: str, encoding: Encoding
) -> types.InlineCompletionItem | None:
    if not fill:
        return None
    start, end = _cursor_line_span(snap, hole, cursor_offset)
    rng = to_lsp_range(snap, start, end, encoding)
    return types.InlineCompletionItem(insert_text=fill, range=rng)


def word_char(ch: str) -> bool:
    """An identifier character, as clients take words for filtering and for the symbol at point."""
    return ch.isalnum() or ch in "_$"


def word_start(snap: Snapshot, cursor: int) -> int:
    """Where the word the cursor ends (the typed prefix) starts on its line; `cursor` when none does."""
    start, floor = cursor, max(snap.line_start(cursor), cursor - LINE_CAP)
    while start > floor and word_char(snap.text[start - 1]):
        start -= 1
    return start


def lsp_completion_item(
    snap: Snapshot, hole: Hole, cursor_offset: int, fill: str, encoding: Encoding
) -> types.CompletionItem | None:
    """Fallback for clients without inline completion: one item whose textEdit carries the whole fill.

    The word typed before the cursor (`sum(val|`) is part of the item: the textEdit replaces it with itself plus
    the fill, and `filterText` and the label start with it, so a client that filters items by the word at the
    cursor (all of them: VS Code from the range's start, eglot by the symbol at point) keeps the item."""
    if not fill or not fill.strip():
        return None
    start, (_, end) = word_start(snap, cursor_offset), _cursor_line_span(snap, hole, cursor_offset)
    typed = snap.text[start:cursor_offset]
    line0 = fill.split("\n")[0]
    first = (typed + line0).strip() if line0.strip() else next(ln.strip() for ln in fill.split("\n") if ln.strip())
    label = first if len(first) <= 60 else first[:57] + "..."
    return types.CompletionItem(
        label=label,
        kind=types.CompletionItemKind.Snippet,
        detail="dg-lsp",
        documentation=types.MarkupContent(kind=types.MarkupKind.Markdown, value=f"```\n{fill}\n```"),
        filter_text=typed + fill,
        text_edit=types.TextEdit(range=to_lsp_range(snap, start, end, encoding), new_text=typed + fill),
        insert_text_format=types.InsertTextFormat.PlainText,
        sort_text="0",
        preselect=True,
    )


def lsp_text_edit(snap: Snapshot, hole: Hole, fill: str, encoding: Encoding) -> types.TextEdit:
    """The edit that replaces the whole hole (any number of lines) with the fill, for workspace/applyEdit."""
    return types.TextEdit(range=to_lsp_range(snap, hole.start, hole.end, encoding), new_text=fill)
