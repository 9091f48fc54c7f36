"""The editable window (dg_lsp.nextedit.window): lines around the cursor, clipped to the enclosing definition, grown
to whole statements, fitted to a token budget."""

from __future__ import annotations

from dg_lsp.documents import DocumentStore
from dg_lsp.nextedit.window import editable_window

URI = "file:///w.py"
CODE = """import os


def first(a):
    x = a + 1
    return x


def second(values):
    total = 0
    for v in values:
        total += v
    result = call(
        total,
        1,
    )
    return result
"""


def chars(text: str) -> list[int]:
    return list(text)  # one "token" per character: budgets in characters


def words(text: str) -> list[int]:
    return text.split()


def snap_of(text: str, language: str = "python"):
    store = DocumentStore()
    store.open(URI, language, 1, text)
    return store.snapshot(URI)


def at(snap, line: int, char: int = 0) -> int:
    return int(snap.starts[line]) + char


def test_the_window_is_the_lines_around_the_cursor_within_the_budget():
    snap = snap_of(CODE)
    win = editable_window(snap, at(snap, 10, 4), 1, 1, 1000, words)
    assert (win.first, win.last) == (9, 11)
    assert win.text == "    total = 0\n    for v in values:\n        total += v"


def test_the_window_stays_inside_the_enclosing_definition():
    snap = snap_of(CODE)
    win = editable_window(snap, at(snap, 4, 4), 5, 5, 1000, words)
    assert (win.first, win.last) == (3, 5)  # def first(a): .. return x, not the imports nor second()


def test_a_window_edge_inside_a_statement_grows_to_the_statement():
    snap = snap_of(CODE)
    win = editable_window(snap, at(snap, 11, 8), 0, 2, 1000, words)
    assert (win.first, win.last) == (10, 15)  # the loop's header and the call's closing line are in
    assert win.text.endswith("    )")


def test_the_budget_drops_far_lines_first_and_below_before_above():
    snap = snap_of(CODE)
    line = snap.text[at(snap, 10):snap.line_end(at(snap, 10))]
    win = editable_window(snap, at(snap, 10, 4), 2, 2, len(line) + 14, chars)
    assert win.first <= 10 <= win.last and len(win.text) <= len(line) + 14
    assert 10 - win.first >= win.last - 10  # at equal distance, the line below went first
    assert editable_window(snap, at(snap, 10, 4), 2, 2, 3, chars) is None  # not even the cursor's line fits


def test_without_a_grammar_the_window_is_plain_lines():
    text = "".join(f"line {i}\n" for i in range(20))
    snap = snap_of(text, "plaintext")
    win = editable_window(snap, at(snap, 10), 2, 3, 1000, words)
    assert (win.first, win.last) == (8, 13)
