"""Fuzz: random incremental edits, in every position encoding, on text with non-ASCII and astral characters and
mixed "\\r", "\\r\\n" and "\\n" line endings, applied to DocumentStore and compared after every change with a
from-scratch rebuild: the text (against an independent reference of LSP's position rules), the line index and the
tree-sitter tree (its s-expression and every node's bytes and points). Fixed seeds."""

from __future__ import annotations

import random
import re

import pytest

from dg_lsp.documents import Document, DocumentStore, line_starts

ENCODINGS = ("utf-8", "utf-16", "utf-32")
EDITS_PER_ENCODING = 1_200
PIECES = ["x", "y1", " ", "    ", "\n", "\r\n", "\r", "(", ")", ":", "=", "def ", "return ", '"', "#", ",",
          "é", "日本", "😀", "𝔘", "\t", "[", "]", "{", "}"]
_BREAK = re.compile("\r\n|\r|\n")


def ref_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of each line as LSP defines lines, end before the line break."""
    out, start = [], 0
    for m in _BREAK.finditer(text):
        out.append((start, m.start()))
        start = m.end()
    out.append((start, len(text)))
    return out


def units(s: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(s.encode("utf-8"))
    if encoding == "utf-16":
        return len(s.encode("utf-16-le")) // 2
    return len(s)


def ref_offset(text: str, line: int, char: int, encoding: str) -> int:
    """LSP position -> str offset, independently of dg_lsp: a character past the line's end is the line's end, a
    line past the last is the end of the text, a unit inside a character rounds down."""
    lines = ref_lines(text)
    if line >= len(lines):
        return len(text)
    start, end = lines[line]
    n = 0
    for i in range(start, end):
        w = units(text[i], encoding)
        if n + w > char:
            return i
        n += w
    return end


def ref_position(text: str, offset: int, encoding: str) -> tuple[int, int]:
    for row, (start, end) in enumerate(ref_lines(text)):
        if offset <= end or row == len(ref_lines(text)) - 1:
            return row, units(text[start:offset], encoding)
    raise AssertionError("unreachable")


def random_piece(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.choice((0, 1, 1, 2, 3, 6))))


def random_change(rng: random.Random, text: str, encoding: str) -> tuple[dict, str]:
    """An LSP change event and the text after it (by the reference rules)."""
    def position() -> tuple[int, int]:
        if rng.random() < 0.1:  # past a line's end, or past the last line
            return rng.randrange(0, len(ref_lines(text)) + 2), rng.randrange(0, 40)
        return ref_position(text, rng.randrange(0, len(text) + 1), encoding)

    a, b = position(), position()
    oa, ob = ref_offset(text, *a, encoding), ref_offset(text, *b, encoding)
    if ob < oa:
        a, b, oa, ob = b, a, ob, oa
    new = random_piece(rng)
    rng_json = {"start": {"line": a[0], "character": a[1]}, "end": {"line": b[0], "character": b[1]}}
    return {"range": rng_json, "text": new}, text[:oa] + new + text[ob:]


def nodes(tree) -> list[tuple]:
    out, cursor = [], tree.walk()
    while True:
        n = cursor.node
        out.append((n.type, n.start_byte, n.end_byte, n.start_point, n.end_point))
        if cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return out


def assert_same_as_rebuild(doc: Document, expected: str) -> None:
    assert doc.text == expected
    assert doc.starts.tolist() == line_starts(expected).tolist() == [s for s, _ in ref_lines(expected)]
    fresh = Document(doc.uri, doc.language_id, doc.version, expected)
    mine, theirs = doc.snapshot().tree, fresh.snapshot().tree
    assert str(mine.root_node) == str(theirs.root_node)
    assert nodes(mine) == nodes(theirs)


SEEDS = {"utf-8": 11, "utf-16": 12, "utf-32": 13}
START = 'def f(x):\r\n    s = "é😀"\r    return x\n\nclass A:\n\tpass\r\n'


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_random_edits_equal_a_rebuild(encoding):
    rng = random.Random(SEEDS[encoding])
    store = DocumentStore()
    store.open("file:///fuzz.py", "python", 1, START)
    text, version, edits = START, 1, 0
    while edits < EDITS_PER_ENCODING:
        batch = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):  # ranges in a batch refer to the text after the one before
            change, text = random_change(rng, text, encoding)
            batch.append(change)
        version += 1
        edits += len(batch)
        store.change("file:///fuzz.py", version, batch, encoding)
        assert_same_as_rebuild(store.get("file:///fuzz.py"), text)
        if len(text) > 600:  # keep documents small so a rebuild per edit stays cheap
            text = text[:300]
            store.change("file:///fuzz.py", version, [{"text": text}], encoding)
    assert edits >= EDITS_PER_ENCODING
