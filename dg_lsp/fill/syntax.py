"""The syntax gate: does a fill make the code around its hole worse? tree-sitter, and Python's own parser.

A bounded window of the document around the hole (see `check_window`) is parsed twice: as it is (the baseline,
`prepare_check`, which does not depend on the fill) and with the fill in the hole. A fill is rejected when
- tree-sitter finds more ERROR/MISSING nodes than in the baseline, or as many but one inside the fill; for Python an
  emptied block (`def f():` with no body, which tree-sitter accepts) counts as an error too;
- for Python, CPython's parser (`compile(..., PyCF_ONLY_AST)`) rejects the window with the fill when it accepted the
  baseline, or reports its first error earlier than the baseline's. tree-sitter-python is lenient where Python is
  not (indentation): `def f():  ""` above an indented body parses for tree-sitter and is an IndentationError.
For Python, a window that is not one whole node (lines around the hole, or clipped) is backed by the innermost
statement around the hole, read whole by Python's parser when at most STATEMENT_MAX_CHARS long (`statement_window`);
for a next edit, when neither parses before it, by the whole file up to FILE_MAX_CHARS (else `unchecked`). Lines
around the hole start at a statement, dedented (dg_lsp.fill.syntax_window); no tree (a first parse stopped at its
budget) means lines around the hole, never no check.
A rejected fill is shortened, by lines and then at token boundaries, to the longest version that passes, or dropped.

The work is bounded and deterministic: the window holds at most WINDOW_MAX_CHARS characters whatever the line or
file length, and the shortening search stops after a number of parsed bytes (not after a time), so the same
snapshot, hole and fill always give the same answer, on a busy machine or an idle one, with the baseline prepared
or not.
"""

from __future__ import annotations

import functools
import re

import tree_sitter

from dg_lsp.documents import Snapshot
from dg_lsp.fill.holes import Hole, ancestors, leading_ws
from dg_lsp.fill.syntax_window import _dedent, _lines, first_error_line, line_window
from dg_lsp.languages import language, parse_until, parser

_CLOSERS = {")": "(", "]": "[", "}": "{"}
_OPENERS = "".join(_CLOSERS.values())
_QUOTES = "\"'`"
_TOKEN_END = re.compile(r"\w+|[^\w\s]")
WINDOW_MAX_LINES = 100
WINDOW_LINES = 25
WINDOW_MAX_CHARS = 8_000  # whatever the lines: a one-line 5 MB file gets a window of this size
# Bytes the shortening search may parse for one fill (tree-sitter and Python's parser both count; the fill itself is
# always checked and the first MIN_TRIES shorter candidates always tried): a keystroke's answer is due at once, a
# command (an explicit action with a progress bar) may search longer. A count, not a clock: the answer must not
# depend on the machine's load.
KEYSTROKE_PARSE_BYTES = 12_000
COMMAND_PARSE_BYTES = 400_000
MIN_TRIES = 2
# Read whole by Python's parser beside a window that is not one whole node (`statement_window`): the held-out standard
# library's largest literal, locale.locale_alias, fits; its CPU cost is gate.statement_check in `python -m
# bench.quality`.
STATEMENT_MAX_CHARS = 40_000
# Read whole by Python's parser for a next edit when neither the window nor the statement around the hole parses
# before it (a window cut inside a string, a bracket): once per proposal, and rare once windows start at a statement.
FILE_MAX_CHARS = 120_000


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


def check_window(snap: Snapshot, hole: Hole) -> tuple[int, int, str]:
    """(start, end, indent) of the text the syntax check parses: the smallest top-level node around the hole if
    it has at most WINDOW_MAX_LINES lines, else the innermost enclosing definition that small (re-parsed
    dedented by its first line's indent), else WINDOW_LINES lines either side; then at most WINDOW_MAX_CHARS / 2
    characters either side of the hole (cut at a line start where one is near, else inside the line). Parsing a
    bounded window keeps the check cheap on big files, where an unclosed bracket or quote in a fill makes
    tree-sitter's error recovery re-parse everything after it."""
    return _window(snap, hole)[:3]


def _window(snap: Snapshot, hole: Hole) -> tuple[int, int, str, bool]:
    """`check_window`'s (start, end, indent), and whether the window is one whole node (complete code), not lines
    around the hole or clipped."""
    text = snap.text
    hole_line = snap.line_start(hole.start)
    fallback = True
    start, end, indent = hole_line, hole.end, ""
    if snap.tree is not None and snap.spec is not None:
        # from the line's first code character: its indent belongs to the enclosing block, not to a method on the line
        lo = hole_line + len(leading_ws(text[hole_line:min(hole.start, hole_line + WINDOW_MAX_CHARS)]))
        b_lo, b_hi = snap.byte_offset(lo), snap.byte_offset(hole.end)
        root = snap.tree.root_node
        chain = ancestors(root, root.descendant_for_byte_range(b_lo, b_hi))[:-1]  # the root's children and below
        for node in reversed(chain):  # outermost first
            n_lines = node.end_point[0] - node.start_point[0] + 1
            if n_lines > WINDOW_MAX_LINES:
                continue
            if node == chain[-1] or node.type in snap.spec.scopes:  # chain[-1]: a top-level node
                s_off, e_off = snap.span(node)
                s_off = snap.line_start(s_off)
                if s_off <= hole_line and e_off >= hole.end:
                    start, end, fallback = s_off, snap.line_end(e_off), False
                    indent = leading_ws(text[start:min(snap.line_end(start), start + WINDOW_MAX_CHARS)])
                    break
    if fallback:  # for Python, moved to start at a statement, dedented (dg_lsp.fill.syntax_window)
        start, end, indent = line_window(snap, hole, WINDOW_LINES)
    end = min(max(end, hole.end), len(text))
    clipped = _clip(snap, hole, start, end, indent)
    return (*clipped, not fallback and clipped[:2] == (start, end))


def statement_window(snap: Snapshot, hole: Hole) -> tuple[int, int, str] | None:
    """(start, end, indent) of the innermost statement around the hole (whole lines, re-parsed dedented), or None if
    none or over STATEMENT_MAX_CHARS. A window inside a literal hundreds of lines long (`encodings/cp857.py`) fails
    Python's parser at its first line, so only the whole statement can judge `0x00ator` or a bad `\\u` escape."""
    if snap.tree is None or snap.spec is None:
        return None
    kinds = snap.spec.statements | snap.spec.scopes
    root = snap.tree.root_node
    chain = ancestors(root, root.descendant_for_byte_range(snap.byte_offset(hole.start), snap.byte_offset(hole.end)))
    # the innermost statement or scope, else the top-level node (chain[-2]: the root's child) around the hole
    node = next((n for i, n in enumerate(chain[:-1]) if n.type in kinds or i == len(chain) - 2), None)
    if node is None:
        return None  # the hole is between top-level statements: the window holds what a fill there can break
    s_off, e_off = snap.span(node)
    start, end = snap.line_start(s_off), snap.line_end(e_off)
    if end - start > STATEMENT_MAX_CHARS or start > hole.start or end < hole.end:
        return None
    return start, end, leading_ws(snap.text[start:min(snap.line_end(start), start + WINDOW_MAX_CHARS)])


def _clip(snap: Snapshot, hole: Hole, start: int, end: int, indent: str) -> tuple[int, int, str]:
    """The window [start, end) cut to WINDOW_MAX_CHARS / 2 characters either side of the hole: at a line start
    where one is near, else (a long line) at the edge of a syntax node, so that no token or string is split."""
    half = WINDOW_MAX_CHARS // 2
    if hole.start - start > half:
        lo = hole.start - half
        row = snap.line_of(lo)
        if int(snap.starts[row]) != lo and row + 1 < len(snap.starts) and int(snap.starts[row + 1]) <= hole.start:
            lo = int(snap.starts[row + 1])  # the next line start, still before the hole
        elif int(snap.starts[row]) != lo:
            lo = _node_start_after(snap, lo, hole.start)
        start, indent = lo, indent if snap.line_start(lo) == lo else ""
    if end - hole.end > half:
        hi = hole.end + half
        line = snap.line_start(hi)
        end = line if line > hole.end else _node_end_before(snap, hi, hole.end)
    return start, end, indent


def _node_start_after(snap: Snapshot, lo: int, limit: int) -> int:
    """The first start of a child of the node spanning [lo, limit) that is at or after `lo` (and before `limit`),
    else `lo`.

    Children are found with a TreeCursor, never with `Node.first_child_for_byte`: py-tree-sitter (0.25, 0.26) wraps
    the null node that call returns when no child qualifies (a leaf: the inside of a long string or comment) and
    the next use of it dereferences NULL (SIGSEGV; tests/reliability/test_tree_sitter_bugs.py)."""
    if snap.tree is None:
        return lo
    b_lo, b_limit = snap.byte_offset(lo), snap.byte_offset(limit)
    cursor = snap.tree.root_node.descendant_for_byte_range(b_lo, b_limit).walk()
    if cursor.goto_first_child_for_byte(b_lo) is None:  # a leaf, or no child ends after b_lo
        return lo
    while cursor.node.start_byte < b_lo:
        if not cursor.goto_next_sibling():
            return lo
    start = cursor.node.start_byte
    return snap.char_offset(start) if start <= b_limit else lo


def _node_end_before(snap: Snapshot, hi: int, limit: int) -> int:
    """The last end of a child of the node spanning [limit, hi) that is at or before `hi` (and after `limit`),
    else `hi`. (A TreeCursor, for the reason `_node_start_after` gives.)"""
    if snap.tree is None:
        return hi
    b_limit, b_hi = snap.byte_offset(limit), snap.byte_offset(hi)
    cursor = snap.tree.root_node.descendant_for_byte_range(b_limit, b_hi).walk()
    # the first child ending after b_hi, else the last child; then back to one ending at or before b_hi
    if cursor.goto_first_child_for_byte(b_hi) is None and not cursor.goto_last_child():
        return hi  # a leaf
    while cursor.node.end_byte > b_hi:
        if not cursor.goto_previous_sibling():
            return hi
    end = cursor.node.end_byte
    return snap.char_offset(end) if end >= b_limit else hi


class SyntaxCheck:
    """Parses window(text[:start] + fill + text[end:]) and compares its errors with the window's own.

    The constructor parses the baseline (the window as it is, the replaced text kept); `adds_errors` parses one
    candidate fill, counting the bytes it parsed in `parsed_bytes`. `window`: (start, end, indent) to parse instead
    of `check_window`'s; `tree`: False for Python's parser alone. For Python, a window that is not one whole node is
    backed by the statement around the hole read whole by Python's parser (`statement`, see `statement_window`);
    with `whole_file`, by the whole file when neither parses before the fill (`_whole_file`)."""

    def __init__(self, snap: Snapshot, hole: Hole, window: tuple[int, int, str] | None = None,
                 tree: bool = True, whole_file: bool = False) -> None:
        self.snap, self.hole, self.tree = snap, hole, tree
        self.parser = parser(snap.language) if snap.language else None
        self.statement: SyntaxCheck | None = None
        self.unchecked = False  # Python's parser could judge no fill here (see `_whole_file`)
        if window is None:
            ws, we, self.indent, whole = _window(snap, hole)
            span = None if whole or snap.language != "python" else statement_window(snap, hole)
            if span is not None:  # Python's parser alone: tree-sitter's check stays on the window
                self.statement = SyntaxCheck(snap, hole, span, tree=False)
        else:
            ws, we, self.indent = window
        self.window = (ws, we)
        head = _dedent(snap.text[ws:hole.start], self.indent, True)
        # a hole of whole lines (a next edit's window, a fill at column 0) is dedented from its first line
        self.at_line_start = hole.start == 0 or snap.text[hole.start - 1] in "\r\n"
        tail_at_line_start = hole.end == 0 or snap.text[hole.end - 1] in "\r\n"
        tail = _dedent(snap.text[hole.end:we], self.indent, tail_at_line_start)
        self.head, self.tail = head.encode("utf-8", "surrogatepass"), tail.encode("utf-8", "surrogatepass")
        self.parsed_bytes = 0
        replaced = _dedent(hole.replaced, self.indent, self.at_line_start)
        self.base = self._errors(replaced.encode("utf-8", "surrogatepass")) if self.parser and tree else []
        # Python's own parser, on the same window (str): the line of the hole, and the baseline's first error
        self.python = snap.language == "python"
        if self.python:
            self.py_head, self.py_tail = head, tail
            self.hole_line = _lines(head) + 1
            self.replaced_lines = _lines(replaced)
            self.py_base = first_error_line(head + replaced + tail)
            if whole_file and window is None and self.blind and (self.statement is None or self.statement.blind):
                self._whole_file()

    @property
    def blind(self) -> bool:
        """Python's parser cannot judge a fill here: the window fails it at or before the hole's last line."""
        return self.python and self.py_base is not None and self.py_base <= self.hole_line + self.replaced_lines

    def _whole_file(self) -> None:
        """Python's parser reads the whole file instead of the statement (FILE_MAX_CHARS at most) when neither the
        window nor the statement parses before the fill; `unchecked` when the file is too long for that. For a next
        edit only: a fill's shortening search would parse the file per candidate on the keystroke's path (the
        window's tree-sitter check and the line window's dedent judge a fill there)."""
        if len(self.snap.text) > FILE_MAX_CHARS:
            self.unchecked = True
            return
        whole = SyntaxCheck(self.snap, self.hole, (0, len(self.snap.text), ""), tree=False)
        if not whole.blind:  # else the file is broken there itself: tree-sitter's check is what is left
            self.statement = whole

    def _errors(self, data: bytes) -> list[int]:
        src = self.head + data + self.tail
        self.parsed_bytes += len(src)
        tree = parse_until(self.parser, src)
        blocks = []
        sb = len(self.head)  # where the fill starts
        if self.snap.language == "python":  # only near the hole: elsewhere the window is as it was
            line = self.head.rfind(b"\n", 0, max(sb - 1, 0)) + 1  # an emptied block sits at its header's end
            blocks = empty_blocks(tree, max(line - 1, 0), sb + len(data) + 1)
        return sorted(error_starts(tree, (sb, sb + len(data))) + blocks)

    def adds_errors(self, fill: str) -> bool:
        """Does `fill` add errors to the window (or to the statement around the hole, when that is checked too)?"""
        bad = self._adds_errors(fill)
        if bad or self.statement is None:
            return bad
        before = self.statement.parsed_bytes
        bad = self.statement.adds_errors(fill)
        self.parsed_bytes += self.statement.parsed_bytes - before
        return bad

    def _adds_errors(self, fill: str) -> bool:
        dedented = _dedent(fill, self.indent, self.at_line_start)
        data = dedented.encode("utf-8", "surrogatepass")
        errors = self._errors(data) if self.tree else []
        if len(errors) != len(self.base):
            if len(errors) > len(self.base):
                return True
        else:  # as many errors as before: fine unless one of them sits in the fill (it fixed one, broke another)
            sb = len(self.head)
            if any(sb <= e <= sb + len(data) for e in errors):
                return True
        return self.python and self._python_rejects(dedented)

    def _python_rejects(self, fill: str) -> bool:
        """Does CPython's parser reject the window with `fill` where it accepted the baseline (or fail earlier)?"""
        base = self.py_base
        if base is not None and base < self.hole_line:
            return False  # the window is broken above the hole already: the parser cannot judge the fill
        src = self.py_head + fill + self.py_tail
        self.parsed_bytes += len(src)
        found = first_error_line(src)
        if found is None:
            return False
        if base is None:
            return True
        added = _lines(fill)
        # the error in baseline lines: inside the fill counts as the hole's line, below it shifts back
        at = self.hole_line if found <= self.hole_line + added else found - added + self.replaced_lines
        return at < base


def prepare_check(snap: Snapshot, hole: Hole, whole_file: bool = False) -> SyntaxCheck | None:
    """The syntax check's fill-independent part (the window and its own parse), or None when the language has no
    parser. Without a tree (a file over MAX_TREE_BYTES, or a first parse stopped at its budget) the window is lines
    around the hole. `whole_file`: see `SyntaxCheck._whole_file` (a next edit, judged once, not shortened)."""
    if not snap.language:
        return None
    check = SyntaxCheck(snap, hole, whole_file=whole_file)
    return check if check.parser is not None else None


def validate(snap: Snapshot, hole: Hole, fill: str, check: SyntaxCheck | None, parse_budget: int) -> str | None:
    """`fill`, or its longest prefix that the gate accepts (the search parses about `parse_budget` bytes), or None."""
    if check is None:
        check = prepare_check(snap, hole)
        if check is None:
            return fill
    if not check.adds_errors(fill):
        return fill
    return _shorten(check, fill, check.parsed_bytes + parse_budget)


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


def _shorten(check: SyntaxCheck, fill: str, until_bytes: int) -> str | None:
    """The longest prefix of `fill` (whole lines, then the next line cut at a token) that adds no errors, or None.
    The first MIN_TRIES candidates are always parsed (the common case, an unclosed bracket or string, is then found
    on any machine), later ones until `check.parsed_bytes` reaches `until_bytes`."""
    lines = fill.split("\n")
    best = ""
    tries = 0

    def done() -> bool:
        return tries >= MIN_TRIES and check.parsed_bytes >= until_bytes

    for n in range(len(lines) - 1, 0, -1):  # whole lines, longest first
        cand = "\n".join(lines[:n]).rstrip()
        if done():
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
            if done():
                break
            tries += 1
            if not check.adds_errors(cand):
                best = cand
                break
    return best or None
