"""A proposal -> minimal edits, and the filters that withhold it (dg_lsp.nextedit.output): unchanged, reverting
the user's last edit, adding a syntax error."""

from __future__ import annotations

from dg_lsp.documents import DocumentStore
from dg_lsp.nextedit.history import EditHistory
from dg_lsp.nextedit.output import REVERSAL, SYNTAX, UNCHANGED, drop_echoes, finish, judge, minimal_edits
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
    edits, why = judge(snap, hole, "def area(wide, height):\n    return wide * height")
    assert why is None and apply(TEXT, edits) == TEXT.replace("width", "wide")
    assert judge(snap, hole, hole.replaced) == ([], UNCHANGED)
    assert judge(snap, hole, hole.replaced.replace("\n", "  \n")) == ([], UNCHANGED)  # trailing spaces


def test_a_proposal_that_undoes_the_last_edit_is_withheld():
    before = TEXT.replace("(wide,", "(width,")
    h = EditHistory()
    h.changed(URI, 1, 2, before, TEXT)
    snap, hole = snap_and_hole(TEXT, 0, 1)
    undo = before.rstrip("\n")
    assert judge(snap, hole, undo, h.recent(URI)) == ([], REVERSAL)
    # the undo as one of several edits counts too
    both = undo.replace("height):", "h):")
    assert judge(snap, hole, both, h.recent(URI)) == ([], REVERSAL)


def test_a_proposal_that_undoes_an_earlier_edit_or_an_accepted_suggestion_is_withheld():
    text = "a = 1\nb = f(a)\nc = f(a)\n"
    h = EditHistory()
    step1 = text.replace("b = f(a)", "b = f(a, 2)")
    h.changed(URI, 1, 2, text, step1)  # the user's edit
    step2 = step1.replace("c = f(a)", "c = f(a, 2)")
    h.changed(URI, 2, 3, step1, step2)  # a suggestion, accepted
    h.mark_accepted(URI, 2)
    step3 = step2.replace("a = 1", "a = 10")
    h.changed(URI, 3, 4, step2, step3)  # the user's last edit, elsewhere
    snap, hole = snap_and_hole(step3, 0, 2, version=4)
    for undo in ("a = 10\nb = f(a)\nc = f(a, 2)", "a = 10\nb = f(a, 2)\nc = f(a)"):
        assert judge(snap, hole, undo, h.recent(URI)) == ([], REVERSAL), undo
    edits, why = judge(snap, hole, "a = 10\nb = f(a, 3)\nc = f(a, 2)", h.recent(URI))
    assert why is None and edits  # a new change of an edited line is not an undo


def test_a_proposal_that_adds_a_syntax_error_is_withheld():
    snap, hole = snap_and_hole(TEXT, 0, 1)
    assert judge(snap, hole, "def area(wide, height:\n    return wide * height") == ([], SYNTAX)


def test_finish_drops_the_cursor_marker_and_keeps_the_window_line_ends():
    snap, hole = snap_and_hole(TEXT, 0, 1)
    assert finish(snap, hole, f"def area(wide{CURSOR}, h):\n    return 1\n\n") == "def area(wide, h):\n    return 1"
    assert finish(snap, hole, "\n \n") is None
    crlf, hole2 = snap_and_hole(TEXT.replace("\n", "\r\n"), 0, 1)
    assert finish(crlf, hole2, "a = 1\nb = 2") == "a = 1\r\nb = 2"


def test_extra_lines_that_repeat_the_code_around_the_window_are_dropped():
    text = "import os\n\ndef f(a):\n    return a\n\nprint(f(1))\n"
    snap, hole = snap_and_hole(text, 2, 3)
    assert drop_echoes(snap, hole, "def f(a):\n    return a + 1\n\nprint(f(1))") == "def f(a):\n    return a + 1"
    snap, hole = snap_and_hole("import os\ndef f(a):\n    return a\n", 1, 2)
    assert drop_echoes(snap, hole, "import os\ndef f(a):\n    return a") == "def f(a):\n    return a"
    assert drop_echoes(snap, hole, "def f(a):\n    b = a\n    return b") == "def f(a):\n    b = a\n    return b"
