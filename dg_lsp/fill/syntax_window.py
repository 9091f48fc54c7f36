"""The syntax gate's window when it is lines around the hole (dg_lsp.fill.syntax), and Python's parser on a window.

Python's parser judges a window only if the window parses before the fill, and a window cut out of a file parses
only if it starts at a statement (not inside a bracket, a string or an `else:`) and is dedented by that statement's
indent, with no statement below it less indented (`line_window`). Where the window still cannot be judged, the
gate reads the whole file (dg_lsp.fill.syntax, FILE_MAX_CHARS).
"""

from __future__ import annotations

import ast
import re
import warnings

from dg_lsp.documents import Snapshot
from dg_lsp.fill.holes import Hole, ancestors, leading_ws

# Without a tree: a line that cannot start a statement (a clause of the statement above, a closing bracket)
_NOT_A_START = re.compile(r"(elif|else|except|finally|case)\b|[)\]}.]")
_CONTINUED = re.compile(r"(\\|[(\[{,])\s*$")
SCAN_LINES = 100  # how far above the window a statement start with a small enough indent is looked for
LINE_PEEK = 400  # characters of a line read to judge it (its indent and first token)


def _dedent(piece: str, indent: str, at_line_start: bool) -> str:
    if not indent:
        return piece
    lines = piece.split("\n")
    return "\n".join(ln[len(indent):] if ln.startswith(indent) and (i or at_line_start) else ln
                     for i, ln in enumerate(lines))


def _lines(s: str) -> int:
    """Line breaks in `s` as Python's tokenizer counts them ("\\n", "\\r\\n", "\\r")."""
    return s.count("\n") + s.count("\r") - s.count("\r\n")


def first_error_line(src: str) -> int | None:
    """The line (1-based) of the first error CPython's parser reports in `src`, None when it parses, 0 when it
    cannot say (nesting too deep for the parser). Only the parser runs (PyCF_ONLY_AST): the compiler's own checks
    (`return` outside a function, ...) do not apply to a window cut out of a file."""
    try:
        with warnings.catch_warnings():  # invalid escapes in the user's strings are not our business
            warnings.simplefilter("ignore")
            compile(src, "<window>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as e:  # IndentationError and TabError included
        return e.lineno or 1
    except (ValueError, RecursionError, MemoryError):
        return 0
    return None


def _statement_at(snap: Snapshot, row: int) -> int | None:
    """The indent (characters) of line `row` if a statement starts at its first code character, else None. With a
    tree: a node of a statement kind starts there; without one, a guess from the line and the one above."""
    s = int(snap.starts[row])
    line = snap.text[s:min(snap.line_end(s), s + LINE_PEEK)]
    code = line.lstrip(" \t")
    if not code.strip() or code.startswith("#"):
        return None
    ind = len(line) - len(code)
    if snap.tree is not None and snap.spec is not None:
        b = snap.byte_offset(s + ind)
        root = snap.tree.root_node
        for node in ancestors(root, root.descendant_for_byte_range(b, b)):
            if node.start_byte != b:
                break
            if node.type in snap.spec.statements:
                return ind
        return None
    if _NOT_A_START.match(code):
        return None
    if row > 0:  # the line above continues onto this one
        p = int(snap.starts[row - 1])
        above = snap.text[max(p, snap.line_end(p) - LINE_PEEK):snap.line_end(p)]
        if _CONTINUED.search(above.split("#")[0]):
            return None
    return ind


def line_window(snap: Snapshot, hole: Hole, lines: int) -> tuple[int, int, str]:
    """(start, end, indent): `lines` lines either side of the hole. For Python, the window starts at the first
    statement in those lines above the hole with the least indent of the statements there and in the hole (else
    at the nearest one above them with an indent that small, at most SCAN_LINES up), is dedented by that indent,
    and ends before the first statement below the hole that is less indented."""
    row, last = snap.line_of(hole.start), snap.line_of(hole.end)
    first = max(row - lines, 0)
    after = last + lines + 1
    n_rows = len(snap.starts)
    start = int(snap.starts[first])
    end = int(snap.starts[after]) if after < n_rows else len(snap.text)
    if snap.language != "python":
        return start, end, ""
    found = [(r, i) for r in range(first, last + 1) if (i := _statement_at(snap, r)) is not None]
    if not found:
        return start, end, ""
    least = min(i for _, i in found)
    top = next((r for r, i in found if i == least and r <= row), None)
    r = first - 1
    while top is None and r >= max(first - SCAN_LINES, 0):
        i = _statement_at(snap, r)
        if i is not None and i <= least:
            top, least = r, i
        r -= 1
    if top is None:
        return start, end, ""
    start = int(snap.starts[top])
    indent = leading_ws(snap.text[start:min(snap.line_end(start), start + LINE_PEEK)])
    for r in range(last + 1, min(after, n_rows)):
        i = _statement_at(snap, r)
        if i is not None and i < len(indent):
            end = int(snap.starts[r])
            break
    return start, max(end, hole.end), indent
