"""Pure: engine fill -> trimmed, re-indented, syntax-checked text, and the LSP items/edits that carry it.

`postprocess` runs small filters in order, each aimed at a known complaint about completion engines:
1. size: at most `hole.max_lines` lines (one for a single-line hole); a block body starts on a new line;
2. indentation: the first line continues the cursor's indentation, later lines are shifted to the hole's
   indent when the model wrote them shallower (block bodies);
3. scope: a line dedented below the hole's indent leaves the hole's scope -- the fill stops there;
4. repeated suffix: trailing fill lines that repeat the lines below the hole are dropped;
5. doubled closers: closing brackets/quotes the user already has after the cursor are not typed twice
   (only when the fill itself has more closers than openers, so `foo(bar())` stays intact);
6. syntax: a bounded window of the edited document around the hole (see `check_window`) is re-parsed; a fill
   that adds tree-sitter ERROR/MISSING nodes (more of them than the window had, or as many but one inside the
   fill) is shortened -- by lines, then at token boundaries -- to the longest version that adds none, or dropped.
   The shortening search has a time budget (it runs on a keystroke); what it has not found in time is not shown.
   The window's own parse does not depend on the fill, so the server runs it (`prepare_check`) beside the engine.
"""

from __future__ import annotations

import functools
import re
import time

import tree_sitter
from lsprotocol import types

from dg_lsp.context import Hole, leading_ws
from dg_lsp.documents import Encoding, Snapshot
from dg_lsp.languages import language, parse_until, parser

_CLOSERS = {")": "(", "]": "[", "}": "{"}
_OPENERS = "".join(_CLOSERS.values())
_QUOTES = "\"'`"
_TOKEN_END = re.compile(r"\w+|[^\w\s]")
_MAX_PARSES = 48
WINDOW_MAX_LINES = 100
WINDOW_LINES = 25
# The search for a shorter version when a fill adds syntax errors: for a keystroke's answer, and for a command
# (an explicit action with a progress bar). Measured on a keystroke replay (bench.lsp_latency's spots, 96
# keystrokes, 2.5 ms then): 22 fills needed the search; 5 were saved by its first parse (4 of them kept most of
# their text), 6 after 3-8 parses (1.4-2.5 ms) kept 1-5 characters, and 11 kept nothing.
VALIDATE_BUDGET_S = 0.001
COMMAND_VALIDATE_BUDGET_S = 0.05
MIN_TRIES = 2  # candidate parses the search always gets, whatever the budget


# ---- filters (each: str -> str) -------------------------------------------------------------------------


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
    text = snap.text
    before = text[snap.line_start(hole.start) : hole.start]
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
        line = text[pos + 1 : len(text) if nxt < 0 else nxt].strip()
        if line:
            out.append(line)
        pos = nxt
    return out


def _drop_repeated_suffix(snap: Snapshot, hole: Hole, fill: str) -> str:
    mid_line = bool(snap.text[snap.line_start(hole.start) : hole.start].strip())
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
    text = snap.text
    rest = text[hole.end : snap.line_end(hole.end)].strip()
    if not rest or not fill.strip():
        return fill
    body = fill.rstrip()
    for k in range(len(rest), 0, -1):
        tail = rest[:k]
        if not body.endswith(tail):
            continue
        brackety = any(ch in _CLOSERS or ch in _QUOTES for ch in tail)
        if (brackety and _excess_closers(body, tail)) or (not brackety and k == len(rest)):
            return body[: len(body) - k].rstrip(" \t")
    return fill


def _close_block(snap: Snapshot, hole: Hole, fill: str) -> str:
    """`{|}` on one line: a multi-line body must end with a newline so the `}` gets its own line."""
    text = snap.text
    rest = text[hole.end : snap.line_end(hole.end)]
    fill = fill.rstrip()
    if hole.kind == "block_body" and rest.strip() and "\n" in fill:
        header_indent = leading_ws(text[snap.line_start(hole.start) : hole.start])
        return fill + "\n" + header_indent
    return fill


# ---- syntax check ------------------------------------------------------------------------------------------


def error_starts(tree: tree_sitter.Tree, focus: tuple[int, int] | None = None) -> list[int]:
    """Start bytes of the ERROR and MISSING nodes (descending only into subtrees that contain one).

    A MISSING token of a hidden kind (a name starting with "_", such as Python's `_newline` in `return a b`) has no
    node of its own: its parent has an error but none of its visible children does. Such an error is counted at the
    first end of a child that falls in `focus` (the fill's bytes: a missing token sits at the end of the token before
    it), else at the parent's start."""
    out, stack = [], [tree.root_node]
    while stack:
        node = stack.pop()
        own = node.is_error or node.is_missing
        if own:
            out.append(node.start_byte)
        kids = [c for c in node.children if c.has_error]
        if not kids and not own and node.has_error:
            ends = [c.end_byte for c in node.children if focus is not None and focus[0] <= c.end_byte <= focus[1]]
            out.append(ends[0] if ends else node.start_byte)
        stack.extend(kids)
    return out


@functools.cache
def _block_query() -> tree_sitter.Query:
    return tree_sitter.Query(language("python"), "(block) @block")


def empty_blocks(tree: tree_sitter.Tree, start: int, end: int) -> list[int]:
    """Start bytes of empty Python blocks that touch bytes [start, end): tree-sitter accepts `def f():` with no
    body, Python does not. (A tree-sitter query: the walk stays in C.)"""
    cursor = tree_sitter.QueryCursor(_block_query())
    cursor.set_byte_range(start, end)
    return [n.start_byte for n in cursor.captures(tree.root_node).get("block", ()) if n.named_child_count == 0]


def count_errors(tree: tree_sitter.Tree) -> int:
    return len(error_starts(tree))


def check_window(snap: Snapshot, hole: Hole) -> tuple[int, int, str]:
    """(start, end, indent) of the text the syntax check parses: the smallest top-level node around the hole if
    it has at most WINDOW_MAX_LINES lines, else the innermost enclosing definition that small (re-parsed
    dedented by its first line's indent), else WINDOW_LINES lines either side. Parsing a bounded window keeps
    the check cheap on big files, where an unclosed bracket or quote in a fill makes tree-sitter's error
    recovery re-parse everything after it."""
    text = snap.text
    lo = max(snap.line_start(hole.start) - 1, 0)
    hi = min(hole.end + 1, len(text))
    fallback = True
    start, end, indent = lo, hi, ""
    if snap.tree is not None and snap.spec is not None:
        b_lo, b_hi = snap.byte_offset(snap.line_start(hole.start)), snap.byte_offset(hole.end)
        node = snap.tree.root_node.descendant_for_byte_range(b_lo, b_hi)
        chain = []
        while node is not None and node.parent is not None:
            chain.append(node)
            node = node.parent
        for node in reversed(chain):  # outermost first
            n_lines = node.end_point[0] - node.start_point[0] + 1
            if n_lines > WINDOW_MAX_LINES:
                continue
            if node.parent.parent is None or node.type in snap.spec.scopes:
                s_off, e_off = snap.span(node)
                s_off = snap.line_start(s_off)
                if s_off <= snap.line_start(hole.start) and e_off >= hole.end:
                    start, end, fallback = s_off, snap.line_end(e_off), False
                    indent = leading_ws(text[start:snap.line_end(start)])
                    break
    if fallback:
        start, end = snap.line_start(hole.start), hole.end
        for _ in range(WINDOW_LINES):
            if start == 0:
                break
            start = snap.line_start(start - 1)
        for _ in range(WINDOW_LINES):
            nxt = snap.line_end(end)
            if nxt >= len(text):
                end = len(text)
                break
            end = nxt + 1
    return start, min(max(end, hole.end), len(text)), indent


def _dedent(piece: str, indent: str, at_line_start: bool) -> str:
    if not indent:
        return piece
    lines = piece.split("\n")
    return "\n".join(ln[len(indent):] if ln.startswith(indent) and (i or at_line_start) else ln
                     for i, ln in enumerate(lines))


class OutOfTime(Exception):
    """A syntax-check parse passed the check's deadline."""


class _Checker:
    """Parses window(text[:start] + fill + text[end:]) and compares its errors with the window's own.

    The window's own parse (the baseline) runs unbounded in the constructor; later parses stop at `deadline`
    (a `time.perf_counter()` value, None for no limit) by raising OutOfTime."""

    def __init__(self, snap: Snapshot, hole: Hole) -> None:
        self.snap, self.hole = snap, hole
        self.deadline: float | None = None
        self.parser = parser(snap.language) if snap.language else None
        ws, we, self.indent = check_window(snap, hole)
        self.window = (ws, we)
        self.head = _dedent(snap.text[ws:hole.start], self.indent, True).encode("utf-8", "surrogatepass")
        tail_at_line_start = hole.end == 0 or snap.text[hole.end - 1] == "\n"
        self.tail = _dedent(snap.text[hole.end:we], self.indent, tail_at_line_start).encode("utf-8", "surrogatepass")
        self.parsed_bytes = 0
        self.parses = 0
        # the window as it is (the replaced text kept) is the error baseline
        replaced = _dedent(hole.replaced, self.indent, False).encode("utf-8", "surrogatepass")
        self.base = self._errors(replaced) if self.parser is not None else []

    def _errors(self, data: bytes) -> list[int]:
        src = self.head + data + self.tail
        self.parsed_bytes += len(src)
        tree = parse_until(self.parser, src, deadline=self.deadline)
        if tree is None:
            self.parser.reset()  # the next candidate is another text
            raise OutOfTime
        blocks = []
        sb = len(self.head)  # where the fill starts
        if self.snap.language == "python":  # only near the hole: elsewhere the window is as it was
            line = self.head.rfind(b"\n", 0, max(sb - 1, 0)) + 1  # an emptied block sits at its header's end
            blocks = empty_blocks(tree, max(line - 1, 0), sb + len(data) + 1)
        return sorted(error_starts(tree, (sb, sb + len(data))) + blocks)

    def adds_errors(self, fill: str) -> bool:
        self.parses += 1
        data = _dedent(fill, self.indent, False).encode("utf-8", "surrogatepass")
        errors = self._errors(data)
        if len(errors) != len(self.base):
            return len(errors) > len(self.base)
        # As many errors as before: fine unless one of them sits in the fill (it fixed one, broke another).
        sb = len(self.head)
        return any(sb <= e <= sb + len(data) for e in errors)


def prepare_check(snap: Snapshot, hole: Hole) -> _Checker | None:
    """The syntax check's fill-independent part (the window and its own parse), or None when there is none."""
    if snap.tree is None or not snap.language:
        return None
    check = _Checker(snap, hole)
    return check if check.parser is not None else None


def _validate(snap: Snapshot, hole: Hole, fill: str, check: _Checker | None, budget_s: float | None) -> str | None:
    if check is None:
        check = prepare_check(snap, hole)
        if check is None:
            return fill
    # The fill itself is always checked (one parse of a bounded window): whether a good fill is shown must not
    # depend on how busy the machine is. Only the search for a shorter version that parses has a deadline.
    check.deadline = None
    if not check.adds_errors(fill):
        return fill
    return _shorten(check, fill, budget_s)


def _balanced_cuts(head: str, line: str) -> list[int]:
    """The token ends of `line` (but its last) to try as cuts after `head`: those where the brackets opened since the
    fill's start are closed and its quotes paired come first, then the others, each group longest first. A fill
    that adds errors is most often an unclosed call or string, and the longest balanced cut is then the answer."""
    depth = sum(head.count(c) for c in _OPENERS) - sum(head.count(c) for c in _CLOSERS)
    quotes = [head.count(q) % 2 for q in _QUOTES]
    cuts: list[tuple[bool, int]] = []
    pos = 0
    for m in _TOKEN_END.finditer(line):
        for ch in line[pos:m.end()]:
            if ch in _CLOSERS:
                depth -= 1
            elif ch in _OPENERS:
                depth += 1
            elif ch in _QUOTES:
                quotes[_QUOTES.index(ch)] ^= 1
        pos = m.end()
        cuts.append((depth == 0 and not any(quotes), m.end()))
    cuts = cuts[:-1]  # the whole line already failed (as part of a longer candidate)
    return [e for ok, e in reversed(cuts) if ok] + [e for ok, e in reversed(cuts) if not ok]


def _shorten(check: _Checker, fill: str, budget_s: float | None) -> str | None:
    """The longest prefix of `fill` (whole lines, then the next line cut at a token) that adds no errors, or None.

    The answer is due on a keystroke, so the search is bounded: the first MIN_TRIES candidates are always parsed
    (so the common case, an unclosed bracket or string, does not depend on how busy the machine is), later ones only
    until `budget_s` has passed (None: no limit) or _MAX_PARSES parses."""
    lines = fill.split("\n")
    best = ""
    deadline = None if budget_s is None else time.perf_counter() + budget_s
    tries = 0

    def late() -> bool:
        if tries < MIN_TRIES:
            check.deadline = None
            return False
        check.deadline = deadline
        return check.parses >= _MAX_PARSES or (deadline is not None and time.perf_counter() > deadline)

    try:
        for n in range(len(lines) - 1, 0, -1):  # whole lines, longest first
            cand = "\n".join(lines[:n]).rstrip()
            if late():
                return best or None
            if cand.strip():
                tries += 1
                if not check.adds_errors(cand):
                    best = cand
                    break
        # then the next line cut at a token boundary (balanced cuts first, longest first)
        n_kept = best.count("\n") + 1 if best else 0
        if n_kept < len(lines):
            head = "\n".join(lines[:n_kept]) + ("\n" if n_kept else "")
            for e in _balanced_cuts(head, lines[n_kept]):
                cand = (head + lines[n_kept][:e]).rstrip()
                if len(cand) <= len(best) or not cand.strip():
                    continue
                if late():
                    break
                tries += 1
                if not check.adds_errors(cand):
                    best = cand
                    break
    except OutOfTime:
        pass
    return best or None


def postprocess(snap: Snapshot, hole: Hole, fill: str, check: _Checker | None = None,
                budget_s: float | None = VALIDATE_BUDGET_S) -> str | None:
    """Engine text -> the text to put in the hole, or None when nothing usable is left. `check`: from
    `prepare_check(snap, hole)` when it was run ahead; `budget_s`: the syntax check's time (None: no limit)."""
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
    fill = _validate(snap, hole, fill, check, budget_s)
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


def lsp_completion_item(
    snap: Snapshot, hole: Hole, cursor_offset: int, fill: str, encoding: Encoding
) -> types.CompletionItem | None:
    """Fallback for clients without inline completion: one item whose textEdit carries the whole fill."""
    if not fill or not fill.strip():
        return None
    start, end = _cursor_line_span(snap, hole, cursor_offset)
    first = next(ln.strip() for ln in fill.split("\n") if ln.strip())
    label = first if len(first) <= 60 else first[:57] + "..."
    return types.CompletionItem(
        label=label,
        kind=types.CompletionItemKind.Snippet,
        detail="dg-lsp",
        documentation=types.MarkupContent(kind=types.MarkupKind.Markdown, value=f"```\n{fill}\n```"),
        text_edit=types.TextEdit(range=to_lsp_range(snap, start, end, encoding), new_text=fill),
        insert_text_format=types.InsertTextFormat.PlainText,
        sort_text="0",
        preselect=True,
    )


def lsp_text_edit(snap: Snapshot, hole: Hole, fill: str, encoding: Encoding) -> types.TextEdit:
    """The edit that replaces the whole hole (any number of lines) with the fill, for workspace/applyEdit."""
    return types.TextEdit(range=to_lsp_range(snap, hole.start, hole.end, encoding), new_text=fill)
