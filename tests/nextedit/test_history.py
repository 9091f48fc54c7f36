"""Edit history (dg_lsp.nextedit.history): keystrokes merged into one edit, bounds, unified diffs with versions,
accepted edits, and the history cleared when the document closes or reopens (over the session's hooks)."""

from __future__ import annotations

import numpy as np

from dg_lsp.documents import line_starts
from dg_lsp.nextedit.history import (
    MAX_AGE_S,
    MAX_EDIT_CHARS,
    MAX_EDITS,
    MERGE_GAP_S,
    EditHistory,
    change_span,
    changed_span,
)
from dg_lsp.nextedit.state import NextEdits

URI = "file:///a.py"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def typing(h: EditHistory, text: str, at: int, typed: str, version: int, clock: Clock | None = None) -> str:
    """Type `typed` one character at a time at `at`, one version each; the text after."""
    for i, ch in enumerate(typed):
        after = text[:at + i] + ch + text[at + i:]
        h.changed(URI, version + i, version + i + 1, text, after)
        text = after
        if clock is not None:
            clock.t += 0.1
    return text


def test_adjacent_keystrokes_merge_into_one_edit_with_its_versions():
    h = EditHistory(Clock())
    text = typing(h, "x = 1\n", 5, "23", 1)
    (edit,) = h.recent(URI)
    assert (edit.start, edit.old, edit.new, edit.before, edit.after) == (5, "", "23", 1, 3)
    assert text == "x = 123\n"
    assert edit.diff() == "@@ -1 +1 @@ version 1 -> 3\n-x = 1\n+x = 123"


def test_a_backspace_trims_the_edit_and_typing_then_deleting_leaves_nothing():
    h = EditHistory(Clock())
    text = typing(h, "ab\n", 2, "cd", 1)
    h.changed(URI, 3, 4, text, "abc\n")  # backspace over "d"
    (edit,) = h.recent(URI)
    assert (edit.old, edit.new, edit.before, edit.after) == ("", "c", 1, 4)
    h.changed(URI, 4, 5, "abc\n", "ab\n")
    assert h.recent(URI) == []


def test_a_replacement_then_typing_on_merges_as_a_rename():
    h = EditHistory(Clock())
    before = "def f(width):\n    return width\n"
    mid = before.replace("(width)", "(w)")
    h.changed(URI, 1, 2, before, mid)
    typing(h, mid, 7, "ide", 2)
    (edit,) = h.recent(URI)
    assert (edit.start, edit.old, edit.new, edit.before, edit.after) == (7, "idth", "ide", 1, 5)  # the least text
    assert edit.diff().splitlines()[1:] == ["-def f(width):", "+def f(wide):"]


def test_edits_apart_in_place_or_time_stay_apart():
    clock = Clock()
    h = EditHistory(clock)
    text = "a = 1\nb = 2\n"
    text = typing(h, text, 5, "0", 1)  # a = 10
    clock.t += MERGE_GAP_S + 1
    text = typing(h, text, 6, "0", 2)  # right after: but too late to merge
    text = typing(h, text, 12, "0", 3)  # b = 20: elsewhere
    assert [(e.start, e.new) for e in h.recent(URI)] == [(5, "0"), (6, "0"), (12, "0")]


def test_the_history_is_bounded_in_count_age_and_size():
    clock = Clock()
    h = EditHistory(clock)
    text = "\n".join(f"line{i}" for i in range(40)) + "\n"
    version = 1
    for i in range(MAX_EDITS + 5):
        at = text.index(f"line{2 * i}")
        after = text[:at] + "#" + text[at:]
        h.changed(URI, version, version + 1, text, after)
        text, version = after, version + 1
    assert len(h.recent(URI)) == MAX_EDITS
    big = "x" * (MAX_EDIT_CHARS * 5)
    h.changed(URI, version, version + 1, text, text + big)
    last = h.recent(URI)[-1]
    assert last.truncated and len(last.new) == MAX_EDIT_CHARS
    clock.t += MAX_AGE_S + 1
    assert h.recent(URI) == []


def test_accepted_edits_are_marked_and_never_merged_into():
    h = EditHistory(Clock())
    text = typing(h, "a\n", 1, "b", 1)
    h.mark_accepted(URI, 1)
    assert h.recent(URI)[-1].accepted and "accepted suggestion" in h.recent(URI)[-1].diff()
    typing(h, text, 2, "c", 2)
    assert [(e.new, e.accepted) for e in h.recent(URI)] == [("b", True), ("c", False)]


def test_changed_span_and_change_span_agree():
    before, after = "hello world\nsecond\n", "hello brave world\nsecond\n"
    assert changed_span(before, after) == (6, 6, 12)
    change = {"range": {"start": {"line": 0, "character": 6}, "end": {"line": 0, "character": 6}},
              "text": "brave "}
    assert change_span([change], before, after, line_starts(before), "utf-16") == (6, 6, 12)
    assert change_span([change, change], before, after, np.asarray(line_starts(before)), "utf-16") is None


def test_close_and_reopen_forget_the_history_and_the_proposal():
    state = NextEdits()
    state.history.changed(URI, 1, 2, "a\n", "ab\n")
    state.propose(URI, (1, 2), 1)
    state.closed(URI)
    assert state.history.recent(URI) == [] and URI not in state.proposals and len(state.history) == 0


def test_accept_checks_the_proposal_and_its_document():
    state = NextEdits()
    p = state.propose(URI, (3, 7), 1)
    assert state.accept(URI, 7, 4, p.id) == (False, "document changed")  # another open of the document
    assert state.accept(URI, 7, 3, "ne-other") == (False, "unknown proposal")
    assert state.accept(URI, 7, 3, p.id) == (True, None)
    assert state.counts.accepted == 1
    assert state.accept(URI, 7, 3, p.id) == (False, "unknown proposal")  # once
