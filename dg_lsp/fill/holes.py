"""Pure functions: cursor/selection -> the syntactic hole (what a fill replaces, its indent and size).

Rules for a cursor at offset `o` on a line split into `before` (line start..o) and `after` (o..line end),
checked in this order. Every cursor hole starts at `o`; it ends at `o` or at the end of whitespace the fill
may replace.

1. no grammar / no tree (unknown language, or file over the size cap):
   code after the cursor -> "rest_of_line" (insert, one line); else "line" (rest of the line, one line).
2. inside a string or comment -> "rest_of_line".
3. "block_body": the line (or the previous non-blank line, when the cursor's line is blank) ends with a block
   opener -- `:` in Python, a block's `{` in C-like languages (not an object/struct literal's) -- and that
   block has no body yet (`after` may be the block's own `}`: `{|}` is what auto-closing editors leave).
   The fill may span many lines one level deeper than the header. With braces, the hole also swallows the
   blank lines between the cursor and the closing `}` line.
4. "bracket_expr": the innermost bracket pair around the cursor -- `foo(|)`, `[1, |]`, `{a: 1, |}` -- holds
   only whitespace between the cursor and the closing bracket. One line when the closer is on the cursor's
   line, else a few lines (the whitespace up to the end of the cursor's line is replaced).
5. code after the cursor -> "rest_of_line" (insert at the cursor, one line, never deletes typed code).
6. blank line -> "statement" (new statements at the cursor's / previous line's indentation).
7. end of a non-empty line: "statement" if the statement the line belongs to is unfinished (a tree-sitter
   ERROR/MISSING node in it, or the line ends in an operator/keyword token such as `=`, `+`, `return`, `,`),
   or if the line opens a block that already has a body (the fill is a new first statement);
   else "rest_of_line" (e.g. a complete call or a continuation line of a multi-line statement).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import tree_sitter

from dg_lsp.documents import Snapshot

KINDS = ("rest_of_line", "statement", "block_body", "bracket_expr", "selection", "line")
STATEMENT_MAX_LINES = 8
BLOCK_MAX_LINES = 24
BRACKET_MAX_LINES = 8
_OPEN = {"(": ")", "[": "]", "{": "}"}
# Tokens after which a line cannot be a finished statement.
_CLOSING_TOKENS = frozenset([")", "]", "}", ";", ":", "'", '"', "`"])
_COMPLETE_KEYWORDS = frozenset(["pass", "break", "continue", "else", "finally", "try", "do", "default"])
_CODE = re.compile(r"\S")
# How much of the cursor's line the rules read either side of the cursor (a one-line 5 MB file has a 5 MB line).
LINE_CAP = 4_096


def _blank(text: str, start: int, end: int) -> bool:
    """Is text[start:end] whitespace only? (Stops at the first code character: no copy of a long span.)"""
    return _CODE.search(text, start, end) is None


def _last_child(node: tree_sitter.Node) -> tree_sitter.Node | None:
    """`node.children[-1]` without building the list (a long array literal has thousands of children)."""
    return node.child(node.child_count - 1) if node.child_count else None


def ancestors(root: tree_sitter.Node, node: tree_sitter.Node) -> list[tree_sitter.Node]:
    """[node, its parent, ..., root]: the nodes following `Node.parent` from `node` visits, in one walk down from
    `root`. tree-sitter keeps no parent links: `Node.parent` walks down from the root on every call, so following it
    up a chain d deep costs d² steps (seconds for `a+b+...` nested 5,000 deep: a long base64 line in Rust)."""
    chain = [root]
    while chain[-1] != node and (child := chain[-1].child_with_descendant(node)) is not None:
        chain.append(child)
    if chain[-1] != node:  # not below root (cannot happen for a node of root's tree): `parent` stops there too
        chain.append(node)
    return chain[::-1]


@dataclass(frozen=True)
class Hole:
    """What a fill replaces: text[start:end] (== replaced). For a cursor hole start is the cursor offset.

    indent: the indentation lines of the fill after the first should have (at least).
    max_lines: how many lines the fill may span (1 = stay on the cursor's line).
    instruction: what the user asked of a rewrite ("make it async"), for chat-format prompts; None for a plain fill.
    """

    kind: str
    start: int
    end: int
    indent: str
    max_lines: int
    replaced: str
    instruction: str | None = None


_INDENT_RUN = re.compile(r"\n([ \t]+)\S")  # the indentation of each line with code (\S: not blank)
_ASCII_ODD_SPACE = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")  # line breaks or whitespace, not " \t\n"


def leading_ws(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_unit(text: str, default: str = "    ") -> str:
    """The file's indentation step: a tab if indented lines use tabs, else the smallest space step.

    Lines are str.splitlines' lines. An ASCII head whose only line break is "\n" and whose only other whitespace is
    space and tab (most code) is read by one regex in C (a few times faster than the loop, and this is on some
    keystrokes' path); any other head by the loop over its lines."""
    head = text[:20_000]
    if head.isascii() and not any(c in head for c in _ASCII_ODD_SPACE):
        runs = _INDENT_RUN.findall("\n" + head)
        if any(r[0] == "\t" for r in runs):
            return "\t"
        step = min(map(len, runs), default=0)
        return " " * step if step in (2, 3, 4, 8) else default
    step = 0
    for line in head.splitlines():
        ws = leading_ws(line)
        if not ws or not line.strip():
            continue
        if ws.startswith("\t"):
            return "\t"
        step = len(ws) if step == 0 else min(step, len(ws))
    return " " * step if step in (2, 3, 4, 8) else default


def _make(snap: Snapshot, kind: str, start: int, end: int, indent: str, max_lines: int) -> Hole:
    return Hole(kind, start, end, indent, max_lines, snap.text[start:end])


def _prev_nonblank_line(text: str, line_start: int) -> tuple[int, int] | None:
    """(start, end) of the nearest non-blank line above the line starting at `line_start`."""
    end = line_start - 1
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        if text[start:end].strip():
            return start, end
        end = start - 1
    return None


def _leaf_at(snap: Snapshot, offset: int) -> tree_sitter.Node:
    """The smallest node covering the character at `offset` (use the last code char before a cursor)."""
    b = snap.byte_offset(offset)
    b1 = snap.byte_offset(offset + 1) if offset < len(snap.text) else b
    return snap.tree.root_node.descendant_for_byte_range(b, b1)


def _in_opaque(snap: Snapshot, offset: int) -> bool:
    """Is the cursor inside a string or comment (a line comment's end counts as inside)?"""
    b = snap.byte_offset(offset)
    root = snap.tree.root_node
    for node in ancestors(root, root.descendant_for_byte_range(max(b - 1, 0), b)):
        if node.type in snap.spec.opaque:
            inside_end = b <= node.end_byte if "comment" in node.type else b < node.end_byte
            return node.start_byte < b and inside_end
    return False


def _block_opener(snap: Snapshot, header_end: int) -> tree_sitter.Node | None:
    """If the code ending at `header_end` (exclusive, last non-ws char) is a block opener, its token node."""
    text, spec = snap.text, snap.spec
    last = header_end - 1
    if last < 0:
        return None
    ch = text[last]
    if spec.colon_blocks:
        if ch != ":":
            return None
        tok = _leaf_at(snap, last)
        # A `:` ending a line opens a block unless it sits in a dict/lambda/slice/annotation inside brackets.
        for parent in ancestors(snap.tree.root_node, tok)[1:]:
            if parent.type in spec.statements or parent.type == "ERROR":
                break
            if parent.type in spec.brackets:
                return None
        return tok
    if ch != "{":
        return None
    tok = _leaf_at(snap, last)
    if tok.type != "{":
        return None
    parent = tok.parent
    if parent is not None and parent.type in spec.blocks:
        return tok
    if parent is not None and parent.type == "ERROR":
        return tok
    return None


def _block_is_empty(snap: Snapshot, tok: tree_sitter.Node, header_line_start: int, after: int) -> int | None:
    """If the block opened by `tok` has no body, the offset where its (whitespace) body ends; else None."""
    text = snap.text
    if snap.spec.colon_blocks:
        header_indent = len(leading_ws(text[header_line_start : header_line_start + LINE_CAP]))
        pos = text.find("\n", after)
        while pos >= 0:
            nxt_end = snap.line_end(pos + 1)
            if not _blank(text, pos + 1, nxt_end):
                line = text[pos + 1 : min(nxt_end, pos + 1 + LINE_CAP)]
                return after if len(leading_ws(line)) <= header_indent else None
            pos = text.find("\n", pos + 1)
        return after
    block = tok.parent
    close = _last_child(block) if block is not None else None
    if close is not None and close.type == "}" and not close.is_missing and block.type != "ERROR":
        body_end = snap.char_offset(close.start_byte)
    else:
        code = _CODE.search(text, after)
        body_end = code.start() if code is not None else len(text)
        if body_end < len(text) and text[body_end] != "}":
            return None
    if not _blank(text, after, body_end):
        return None
    return body_end


def _block_hole(snap: Snapshot, offset: int, line_start: int, line_end: int, blank: bool) -> Hole | None:
    text = snap.text
    if blank:
        prev = _prev_nonblank_line(text, line_start)
        if prev is None:
            return None
        header_start, header_end = prev
    else:
        header_start, header_end = line_start, offset
    head_from = max(header_start, header_end - LINE_CAP)
    code_end = head_from + len(text[head_from:header_end].rstrip())
    tok = _block_opener(snap, code_end)
    if tok is None:
        return None
    body_end = _block_is_empty(snap, tok, header_start, offset)
    header_indent = leading_ws(text[header_start:min(header_end, header_start + LINE_CAP)])
    indent = header_indent + indent_unit(text, snap.spec.indent)
    before = text[max(line_start, offset - LINE_CAP):offset]
    if blank and len(before) > len(header_indent):
        indent = before  # the editor already auto-indented the new line: follow it
    if body_end is None:
        return None if blank else _make(snap, "statement", offset, line_end, indent, STATEMENT_MAX_LINES)
    end = line_end if blank else offset
    if not snap.spec.colon_blocks and body_end > line_end:
        # Swallow blank lines up to (not including) the newline that precedes the closing `}` line.
        nl = text.rfind("\n", offset, body_end)
        end = max(end, nl) if text[nl + 1 : body_end].strip() == "" and nl > line_end else end
    return _make(snap, "block_body", offset, end, indent, BLOCK_MAX_LINES)


def _bracket_hole(snap: Snapshot, offset: int, line_start: int, line_end: int) -> Hole | None:
    spec, text = snap.spec, snap.text
    b = snap.byte_offset(offset)
    root = snap.tree.root_node
    for node in ancestors(root, root.descendant_for_byte_range(b, b)):
        if node.type in spec.blocks:
            return None
        if node.child_count >= 2:
            first, last = node.child(0), _last_child(node)
            pair = _OPEN.get(first.type)
            if pair and last.type == pair and first.end_byte <= b <= last.start_byte and not last.is_missing:
                if node.type not in spec.brackets and first.type == "{":
                    return None
                close = snap.char_offset(last.start_byte)
                if not _blank(text, offset, close):
                    return None
                before = text[max(line_start, offset - LINE_CAP):offset]
                unit = indent_unit(text, spec.indent)
                indent = before if not before.strip() else leading_ws(before) + unit
                if close <= line_end:
                    return _make(snap, "bracket_expr", offset, close, indent, 1)
                return _make(snap, "bracket_expr", offset, line_end, indent, BRACKET_MAX_LINES)
    return None


def _unfinished(snap: Snapshot, last: int) -> bool:
    """Is the statement whose last code char before the cursor is at `last` unfinished?"""
    spec = snap.spec
    leaf = _leaf_at(snap, last)
    if leaf.is_error or leaf.is_missing:
        return True
    if not leaf.is_named and leaf.type not in _CLOSING_TOKENS and leaf.type not in _COMPLETE_KEYWORDS:
        return True
    root = snap.tree.root_node
    chain = ancestors(root, leaf)
    for node, parent in itertools.pairwise(chain):
        if node.type == "ERROR" or node.is_missing:
            return True
        if node.type in spec.statements or parent.type in spec.blocks or parent == root:
            return node.has_error
    return chain[-1].has_error


def _fallback_hole(snap: Snapshot, offset: int, line_end: int) -> Hole:
    if not _blank(snap.text, offset, line_end):
        return _make(snap, "rest_of_line", offset, offset, "", 1)
    line_start = snap.line_start(offset)
    indent = leading_ws(snap.text[line_start:min(offset, line_start + LINE_CAP)])
    return _make(snap, "line", offset, line_end, indent, 1)


def hole_at_cursor(snap: Snapshot, offset: int) -> Hole:
    """The hole a fill at the cursor should fill; see the module docstring for the rules."""
    text = snap.text
    offset = min(max(offset, 0), len(text))
    line_start, line_end = snap.line_start(offset), snap.line_end(offset)
    line_end = max(line_end, offset)
    if snap.tree is None or snap.spec is None:
        return _fallback_hole(snap, offset, line_end)
    # at most LINE_CAP characters either side: only whitespace and the last code character before the cursor matter
    before_start = max(line_start, offset - LINE_CAP)
    before, after = text[before_start:offset], text[offset:min(line_end, offset + LINE_CAP)]
    line_indent = leading_ws(text[line_start:min(line_end, line_start + LINE_CAP)])
    if _in_opaque(snap, offset):
        return _make(snap, "rest_of_line", offset, offset, line_indent, 1)
    blank = not before.strip() and not after.strip()
    if after.strip() in ("", "}"):  # `{|}` is what auto-closing brackets leave
        hole = _block_hole(snap, offset, line_start, line_end, blank)
        if hole is not None:
            return hole
    hole = _bracket_hole(snap, offset, line_start, line_end)
    if hole is not None:
        return hole
    if after.strip():
        return _make(snap, "rest_of_line", offset, offset, line_indent, 1)
    if blank:
        indent = before
        if not indent:
            prev = _prev_nonblank_line(text, line_start)
            indent = leading_ws(text[prev[0] : prev[1]]) if prev else ""
        return _make(snap, "statement", offset, line_end, indent, STATEMENT_MAX_LINES)
    last = before_start + len(before.rstrip()) - 1
    if _unfinished(snap, last):
        return _make(snap, "statement", offset, line_end, line_indent, STATEMENT_MAX_LINES)
    return _make(snap, "rest_of_line", offset, line_end, line_indent, 1)


def _whole_lines(text: str, start: int, end: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, start) + 1
    if end > start and text[end - 1] == "\n":
        end -= 1
    nl = text.find("\n", end)
    return start, len(text) if nl < 0 else nl


def _clean_edge(node: tree_sitter.Node) -> bool:
    return node.is_named or node.type in (",", ";")


def _whole_nodes(snap: Snapshot, start: int, end: int) -> tuple[int, int]:
    """Smallest run of sibling syntax nodes covering [start, end) (surrounding whitespace ignored)."""
    text = snap.text
    seg = text[start:end]
    s = start + (len(seg) - len(seg.lstrip()))
    e = end - (len(seg) - len(seg.rstrip()))
    if s >= e:
        return _whole_lines(text, start, end)
    bs, be = snap.byte_offset(s), snap.byte_offset(e)
    node = snap.tree.root_node.descendant_for_byte_range(bs, be)
    if node.start_byte == bs and node.end_byte == be:
        return s, e
    kids = _children_over(node, bs, be)
    if not kids or not _clean_edge(kids[0]) or not _clean_edge(kids[-1]):
        # An operator or bracket at the edge (`total =`): the enclosing node is the smallest sensible unit.
        ws, we = snap.span(node)
    else:
        ws, we = snap.char_offset(kids[0].start_byte), snap.char_offset(kids[-1].end_byte)
    return min(ws, s), max(we, e)  # error recovery can leave bytes outside every node: still cover them


def _children_over(node: tree_sitter.Node, start: int, end: int) -> list[tree_sitter.Node]:
    """The children of `node` that overlap bytes [start, end), visited from the first one that ends after `start`."""
    cursor = node.walk()
    if cursor.goto_first_child_for_byte(start) is None:
        return []
    kids = []
    while cursor.node.start_byte < end:
        if cursor.node.end_byte > start:
            kids.append(cursor.node)
        if not cursor.goto_next_sibling():
            break
    return kids


def hole_for_selection(snap: Snapshot, start: int, end: int, widen: bool = False) -> Hole:
    """A "selection" hole over [start, end). With `widen`, grow to whole syntax nodes (or whole lines without
    a tree) so a rewrite never splits a token or a statement."""
    text = snap.text
    start, end = sorted((min(max(start, 0), len(text)), min(max(end, 0), len(text))))
    if widen:
        if snap.tree is not None:
            start, end = _whole_nodes(snap, start, end)
        else:
            start, end = _whole_lines(text, start, end)
    # A selection that ends at the start of a line (a whole-line region: Emacs' C-SPC C-n, VS Code's shift+down) holds
    # the line break before it; a rewrite rarely ends with one, and then the next line would join the last one. The
    # line break is not part of what the user wants rewritten: it stays.
    if end > start and snap.line_start(end) == end and end > 0 and text[end - 1] in "\r\n":
        end -= 2 if text[end - 2:end] == "\r\n" and end - 2 >= start else 1
    line_start = snap.line_start(start)
    indent = leading_ws(text[line_start : min(max(start, snap.line_end(line_start)), line_start + LINE_CAP)])
    lines = text.count("\n", start, end) + 1
    return _make(snap, "selection", start, end, indent, 2 * lines + 4)
