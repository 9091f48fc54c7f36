"""Holes to fill: spans of a Python file cut along tree-sitter syntax, or at random, for training and the bench."""

from __future__ import annotations

import random
from dataclasses import dataclass

import tree_sitter_python
from tree_sitter import Language, Node, Parser

KINDS = ("rest_of_line", "statement", "block_body", "bracket", "random_span")
# Training and bench mix, weighted toward the short holes an editor asks for most.
DEFAULT_KIND_WEIGHTS = {"rest_of_line": 0.35, "statement": 0.2, "block_body": 0.1, "bracket": 0.15, "random_span": 0.2}
MAX_HOLE_CHARS = 320  # a 63-token canvas holds roughly this much Python; longer candidates are never drawn

_SIMPLE_STATEMENTS = {
    "expression_statement",
    "return_statement",
    "import_statement",
    "import_from_statement",
    "raise_statement",
    "assert_statement",
    "delete_statement",
    "global_statement",
    "nonlocal_statement",
    "pass_statement",
    "break_statement",
    "continue_statement",
    "future_import_statement",
}
_COMPOUND_STATEMENTS = {
    "if_statement",
    "for_statement",
    "while_statement",
    "with_statement",
    "try_statement",
    "function_definition",
    "decorated_definition",
    "class_definition",
}
_BRACKETED = {
    "argument_list",
    "parameters",
    "list",
    "tuple",
    "dictionary",
    "set",
    "parenthesized_expression",
    "list_comprehension",
    "dictionary_comprehension",
    "set_comprehension",
    "generator_expression",
    "subscript",
}
_OPEN = {"(", "[", "{"}
_CLOSE = {")", "]", "}"}


@dataclass(frozen=True)
class Hole:
    """A span [start, end) of a file's text (character offsets) and how it was cut."""

    start: int
    end: int
    kind: str

    def split(self, text: str) -> tuple[str, str, str]:
        """(prefix, middle, suffix)."""
        return text[: self.start], text[self.start : self.end], text[self.end :]


def python_parser() -> Parser:
    return Parser(Language(tree_sitter_python.language()))


class FileHoles:
    """All candidate holes of one file, by kind (the tree is parsed once, offsets converted to characters)."""

    def __init__(self, text: str, parser: Parser) -> None:
        self.text = text
        data = text.encode("utf-8")
        self._ascii = len(data) == len(text)
        self._char_of: list[int] | None = None
        if not self._ascii:
            self._char_of = [0] * (len(data) + 1)
            pos = 0
            for ci, ch in enumerate(text):
                n = len(ch.encode("utf-8"))
                for k in range(n):
                    self._char_of[pos + k] = ci
                pos += n
            self._char_of[len(data)] = len(text)
        self.tree = parser.parse(data)
        self.candidates: dict[str, list[tuple[int, int]]] = {k: [] for k in KINDS if k != "random_span"}
        self._collect(self.tree.root_node)

    def _c(self, byte: int) -> int:
        return byte if self._char_of is None else self._char_of[byte]

    def _add(self, kind: str, start: int, end: int) -> None:
        s, e = self._c(start), self._c(end)
        mid = self.text[s:e]
        if 0 < e - s <= MAX_HOLE_CHARS and mid.strip():
            self.candidates[kind].append((s, e))

    def _line_start_before(self, char: int) -> bool:
        """True when only indentation precedes `char` on its line."""
        ls = self.text.rfind("\n", 0, char) + 1
        return not self.text[ls:char].strip()

    def _collect(self, root: Node) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            t = node.type
            if node.child_count == 0 and node.end_byte > node.start_byte and t not in _CLOSE:
                s = self._c(node.start_byte)
                eol = self.text.find("\n", s)
                eol = len(self.text) if eol < 0 else eol
                if t != "comment" or self._line_start_before(s):
                    self._add_chars("rest_of_line", s, eol)
            elif t in _SIMPLE_STATEMENTS or t in _COMPOUND_STATEMENTS:
                if self._line_start_before(self._c(node.start_byte)):
                    self._add("statement", node.start_byte, node.end_byte)
            if t == "block" and node.parent is not None and node.named_child_count:
                if self._line_start_before(self._c(node.start_byte)):
                    self._add("block_body", node.start_byte, node.end_byte)
            if t in _BRACKETED and node.child_count >= 3:
                first, last = node.children[0], node.children[-1]
                if t == "subscript":
                    opens = [c for c in node.children if c.type == "["]
                    first = opens[0] if opens else first
                if first.type in _OPEN and last.type in _CLOSE and last.start_byte > first.end_byte:
                    self._add("bracket", first.end_byte, last.start_byte)
            stack.extend(reversed(node.children))

    def _add_chars(self, kind: str, s: int, e: int) -> None:
        mid = self.text[s:e]
        if 0 < e - s <= MAX_HOLE_CHARS and mid.strip():
            self.candidates[kind].append((s, e))

    def sample(self, kind: str, rng: random.Random) -> Hole | None:
        """One hole of `kind`, or None when the file has none."""
        if kind == "random_span":
            n = len(self.text)
            if n < 2:
                return None
            length = min(n - 1, int(round(2 ** rng.uniform(0, 7.5))))  # 1..~180 characters, log-uniform
            start = rng.randrange(0, n - length)
            if not self.text[start : start + length].strip():
                return None
            return Hole(start, start + length, kind)
        cands = self.candidates[kind]
        if not cands:
            return None
        s, e = cands[rng.randrange(len(cands))]
        return Hole(s, e, kind)


def pick_kind(rng: random.Random, weights: dict[str, float] | None = None) -> str:
    weights = weights or DEFAULT_KIND_WEIGHTS
    kinds = list(weights)
    return rng.choices(kinds, weights=[weights[k] for k in kinds])[0]


def error_count(parser: Parser, text: str) -> int:
    """Number of ERROR / MISSING nodes in the parse of `text` (the bench's 'parses without new errors' test)."""
    tree = parser.parse(text.encode("utf-8"))
    count, stack = 0, [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            count += 1
        if node.has_error:
            stack.extend(node.children)
    return count
