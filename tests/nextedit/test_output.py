"""A proposal -> minimal edits, and the filters that withhold it (dg_lsp.nextedit.output): unchanged, reverting
the user's last edit, adding a syntax error."""

from __future__ import annotations

from dg_lsp.documents import DocumentStore
from dg_lsp.nextedit.history import EditHistory
from dg_lsp.nextedit.output import REVERSAL, SYNTAX, UNCHANGED, finish, judge, minimal_edits
from dg_lsp.nextedit.prompt import CURSOR, window_hole
from dg_lsp.nextedit.window import Window

URI = "file:///a.py"


def apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in reversed(edits):
        text = text[:start] + new + text[end:]
    return text


def test_minimal_edits_touch_only_what_changed():
    old = "def f(a):\n    x = a + 1\n    return x\n"
    new = "def f(a, b):\n    x = a + b\n    return x\n"
    edits = minimal_edits(10, old, new)
    assert edits == [(17, 17, ", b"), (32, 33, "b")]
    assert apply("#" * 10 + old, edits) == "#" * 10 + new


def test_minimal_edits_for_inserted_and_deleted_lines():
    old = "a\nb\nc\n"
    for new in ("a\nb\nb2\nc\n", "a\nc\n", "z\na\nb\nc\n", "a\nb\nc\nd\n", "A\nb\nC\n"):
        edits = minimal_edits(0, old, new)
        assert apply(old, edits) == new
        assert [s for s, _, _ in edits] == sorted(s for s, _, _ in edits)
        assert all(e1 <= s2 for (_, e1, _), (s2, _, _) in zip(edits, edits[1:], strict=False))


def snap_and_hole(text: str, first: int, last: int, version: int = 2):
    store = DocumentStore()
    store.open(URI, "python", version, text)
    snap = store.snapshot(URI)
    start = int(snap.starts[first])
    end = snap.line_end(int(snap.starts[last]))
    return snap, window_hole(snap, Window(start, end, first, last, text[start:end]))


TEXT = "def area(wide, height):\n    return width * height\n"


def test_a_proposal_is_diffed_into_edits_and_an_unchanged_one_is_nothing():
    snap, hole = snap_and_hole(TEXT, 0, 1)
    edits, why = judge(snap, hole, "def area(wide, height):\n    return wide * height", None)
    assert why is None and apply(TEXT, edits) == TEXT.replace("width", "wide")
    assert judge(snap, hole, hole.replaced, None) == ([], UNCHANGED)
    assert judge(snap, hole, hole.replaced.replace("\n", "  \n"), None) == ([], UNCHANGED)  # trailing spaces


def test_a_proposal_that_undoes_the_last_edit_is_withheld():
    before = TEXT.replace("(wide,", "(width,")
    h = EditHistory()
    h.changed(URI, 1, 2, before, TEXT)
    snap, hole = snap_and_hole(TEXT, 0, 1)
    undo = before.rstrip("\n")
    assert judge(snap, hole, undo, h.last(URI)) == ([], REVERSAL)
    # the undo as one of several edits counts too
    both = undo.replace("height):", "h):")
    assert judge(snap, hole, both, h.last(URI)) == ([], REVERSAL)


def test_a_proposal_that_adds_a_syntax_error_is_withheld():
    snap, hole = snap_and_hole(TEXT, 0, 1)
    assert judge(snap, hole, "def area(wide, height:\n    return wide * height", None) == ([], SYNTAX)


def test_finish_drops_the_cursor_marker_and_keeps_the_window_line_ends():
    snap, hole = snap_and_hole(TEXT, 0, 1)
    assert finish(snap, hole, f"def area(wide{CURSOR}, h):\n    return 1\n\n") == "def area(wide, h):\n    return 1"
    assert finish(snap, hole, "\n \n") is None
    crlf, hole2 = snap_and_hole(TEXT.replace("\n", "\r\n"), 0, 1)
    assert finish(crlf, hole2, "a = 1\nb = 2") == "a = 1\r\nb = 2"
