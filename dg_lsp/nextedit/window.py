"""The editable window of a next edit: whole lines around the cursor that the proposal may rewrite.

1. lines: `above` lines before the cursor's line and `below` after it (settings nextEditLinesAbove/Below);
2. clipped to the enclosing block: the innermost definition (function, class, ...) holding the cursor, so a
   proposal never spills into the next function (no grammar: no clip);
3. grown along syntax nodes: a window edge that cuts a statement (a multi-line call, an `if` header and its
   body's first line) moves out to the statement's first / last line, inside the clip;
4. fitted to `budget` tokens (what the canvas holds with headroom): lines farthest from the cursor go first, from
   below before above (below is where the follow-up edits are), never the cursor's line. A single line over the
   budget gives no window (None).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dg_lsp.documents import Snapshot
from dg_lsp.fill.holes import ancestors

Encode = Callable[[str], list[int]]
MAX_LINE_CHARS = 1_000  # a window line longer than this (minified code, data) means no window


@dataclass(frozen=True)
class Window:
    """text[start:end]: lines first..last (0-based, inclusive), without the last line's line break."""

    start: int
    end: int
    first: int
    last: int
    text: str


def _line_span(snap: Snapshot, first: int, last: int) -> tuple[int, int]:
    start = int(snap.starts[first])
    return start, snap.line_end(int(snap.starts[last]))


def _enclosing(snap: Snapshot, cursor: int) -> tuple[int, int] | None:
    """(first line, last line) of the innermost definition holding the cursor, or None."""
    if snap.tree is None or snap.spec is None:
        return None
    b = snap.byte_offset(cursor)
    root = snap.tree.root_node
    for node in ancestors(root, root.descendant_for_byte_range(b, b)):
        if node.type in snap.spec.scopes:
            s, e = snap.span(node)
            return snap.line_of(s), snap.line_of(max(s, e - 1))
    return None


def _cut_statement(snap: Snapshot, line: int, first: int, last: int, lo: int, hi: int, top: bool) -> int:
    """Where the window's edge at `line` (its first line when `top`, else its last) moves to so that it does not cut
    a statement in two: the start (end) line of the innermost statement that holds `line` and crosses the edge,
    within lines lo..hi; `line` itself when none does. A statement holding the whole window (an enclosing loop or
    `if`) is not cut by it."""
    if snap.tree is None or snap.spec is None:
        return line
    start = int(snap.starts[line])
    end, text = snap.line_end(start), snap.text
    while start < end and text[start] in " \t":  # the line's first code character
        start += 1
    b = snap.byte_offset(start)
    root = snap.tree.root_node
    for node in ancestors(root, root.descendant_for_byte_range(b, b)):
        if node.type in snap.spec.statements:
            s, e = snap.span(node)
            s_line, e_line = snap.line_of(s), snap.line_of(max(s, e - 1))
            if (s_line <= first and e_line >= last) or s_line < lo or e_line > hi:
                break
            if top and s_line < line:
                return s_line
            if not top and e_line > line:
                return e_line
    return line


def editable_window(snap: Snapshot, cursor: int, above: int, below: int, budget: int,
                    encode: Encode) -> Window | None:
    """The window around `cursor` (see the module docstring), or None when not even the cursor's line fits."""
    line, n_lines = snap.line_of(cursor), len(snap.starts)
    lo, hi = 0, n_lines - 1
    if (block := _enclosing(snap, cursor)) is not None:
        lo, hi = block
    first, last = max(lo, line - above), min(hi, line + below)
    grown_first = _cut_statement(snap, first, first, last, lo, hi, top=True)
    grown_last = _cut_statement(snap, last, first, last, lo, hi, top=False)
    if line - grown_first <= 2 * max(above, 1):  # grow, but not into a long statement far away
        first = grown_first
    if grown_last - line <= 2 * max(below, 1):
        last = grown_last
    while True:
        start, end = _line_span(snap, first, last)
        text = snap.text[start:end]
        if any(len(ln) > MAX_LINE_CHARS for ln in text.split("\n")):
            if first == last:
                return None
        elif len(encode(text)) <= budget:
            return Window(start, end, first, last, text)
        if first == last == line:
            return None
        # drop the line farthest from the cursor; below before above at the same distance
        if last - line >= line - first and last > line:
            last -= 1
        else:
            first += 1
