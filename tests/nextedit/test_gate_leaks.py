"""Proposals that add a syntax error are never shown (issue 23), in the shapes that leaked past the syntax gate in
`python -m bench.next_edit --min-confidence 0`: a window of whole lines read as if it started mid-line
(difflib.py:864, enum.py:472), lines around the hole starting inside an indented block (idlelib/searchbase.py:103,
difflib.py:1526), and a document with no parse tree yet (imaplib.py:216)."""

from __future__ import annotations

import dataclasses

from dg_lsp.documents import DocumentStore
from dg_lsp.fill.edits import postprocess
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.fill.syntax import FILE_MAX_CHARS, SyntaxCheck, first_error_line, prepare_check
from dg_lsp.nextedit.output import SYNTAX, UNCHECKED, judge
from dg_lsp.nextedit.prompt import window_hole
from dg_lsp.nextedit.window import Window

URI = "file:///a.py"


def snap_and_hole(text: str, first: int, last: int, tree: bool = True):
    store = DocumentStore()
    store.open(URI, "python", 1, text)
    snap = store.snapshot(URI)
    if not tree:
        snap = dataclasses.replace(snap, tree=None)
    start = int(snap.starts[first])
    end = snap.line_end(int(snap.starts[last]))
    return snap, window_hole(snap, Window(start, end, first, last, text[start:end]))


def propose(snap, hole, old: str, new: str) -> str:
    assert old in hole.replaced
    return hole.replaced.replace(old, new, 1)


def broken_by(snap, hole, proposed: str) -> bool:
    """Does the proposal make the whole file stop parsing (it parsed before)?"""
    assert first_error_line(snap.text) is None
    return first_error_line(snap.text[:hole.start] + proposed + snap.text[hole.end:]) is not None


# difflib.py:864: a method of a class over 100 lines, the window whole lines in its body (the check window is the
# method, dedented by its indent)
PAD = "".join(f"    def helper{i}(self):\n        return {i}\n\n" for i in range(40))
DIFFER = '''class Differ:
    """Compare sequences of lines."""

    def __init__(self, linejunk=None):
        self.linejunk = linejunk

    def compare(self, a, b):
        cruncher = SequenceMatcher(self.linejunk, a, b)
        for tag, alo, ahi, blo, bhi in cruncher.get_opcodes():
            if tag == 'replace':
                g = self._fancy_replace(a, alo, ahi, b, blo, bhi)
            elif tag == 'delete':
                g = self._dump('-', a, alo, ahi)
            else:
                raise ValueError('unknown tag %r' % (tag,))
            yield from g

    def _dump(self, tag, x, lo, hi):
        for i in range(lo, hi):
            yield '%s %s' % (tag, x[i])

''' + PAD


def test_a_window_of_whole_lines_is_dedented_from_its_first_line():
    snap, hole = snap_and_hole(DIFFER, 18, 19)  # the body of _dump: the check window is the method
    check = prepare_check(snap, hole)
    assert check is not None and check.py_base is None  # the window parses before the proposal
    for old, new in (("        for i", "    for i"),  # passed before: only Python's parser sees it
                     ("for i in range(lo, hi):", "for i in range(lo, new hi):"),
                     ("hi):", "hi)")):
        proposed = propose(snap, hole, old, new)
        assert broken_by(snap, hole, proposed), new
        assert judge(snap, hole, proposed) == ([], SYNTAX), new


def test_a_valid_proposal_in_a_window_of_whole_lines_is_not_withheld():
    snap, hole = snap_and_hole(DIFFER, 7, 9)  # the first lines of compare's body
    for old, new in (("cruncher = ", "cruncher == "),  # withheld before: the window failed at the hole's line
                     ("'replace'", "'replace' or tag == 'swap'")):
        fine = propose(snap, hole, old, new)
        assert not broken_by(snap, hole, fine)
        edits, why = judge(snap, hole, fine)
        assert why is None and edits, new
    proposed = propose(snap, hole, "if tag == 'replace':", "if tag == 'replace'")
    assert judge(snap, hole, proposed) == ([], SYNTAX)


def long_function(indent: str = "") -> str:
    """A class whose method is over 100 lines (no node around a hole in its middle is small enough: the gate reads
    lines around the hole), as in idlelib/searchbase.py and difflib.py."""
    body = "".join(f"{indent}        x{i} = self.value({i}, key={i})\n" for i in range(60))
    loop = (f"{indent}        for name in names:\n{indent}            if name:\n"
            f"{indent}                self.make_entry(name, kind)\n{indent}            else:\n"
            f"{indent}                self.skip(name)\n")
    return (f"{indent}class SearchDialogBase:\n{indent}    title = 'Search'\n\n"
            f"{indent}    def create_entries(self, names, kind):\n{body}{loop}{body}"
            f"{indent}        return x0\n\n{indent}    def create_widgets(self):\n{indent}        pass\n")


def test_lines_around_the_hole_inside_an_indented_block_start_at_a_statement_and_are_dedented():
    text = long_function()
    rows = text.split("\n")
    at = next(i for i, r in enumerate(rows) if "for name in names" in r)
    snap, hole = snap_and_hole(text, at + 1, at + 4)
    check = prepare_check(snap, hole)
    assert check is not None and check.py_base is None  # the window parses before the proposal
    for old, new in (("self.make_entry(name, kind)", "self.make_entry(name, new kind)"),
                     ("if name:", "if name"),
                     ("            else:", "          else:")):
        proposed = propose(snap, hole, old, new)
        assert broken_by(snap, hole, proposed), new
        assert judge(snap, hole, proposed) == ([], SYNTAX), new


def test_without_a_parse_tree_the_proposal_is_still_checked():
    text = long_function()
    rows = text.split("\n")
    at = next(i for i, r in enumerate(rows) if "for name in names" in r)
    snap, hole = snap_and_hole(text, at + 1, at + 4, tree=False)
    proposed = propose(snap, hole, "self.make_entry(name, kind)", "self.make_entry(name, new kind)")
    assert broken_by(snap, hole, proposed)
    assert judge(snap, hole, proposed) == ([], SYNTAX)
    fine = propose(snap, hole, "self.make_entry(name, kind)", "self.make_entry(name, kind, 1)")
    assert judge(snap, hole, fine)[1] is None
    snap, hole = snap_and_hole(DIFFER, 9, 12, tree=False)
    proposed = propose(snap, hole, "if tag == 'replace':", "if tag == 'replace'")
    assert judge(snap, hole, proposed) == ([], SYNTAX)


def test_a_fill_without_a_parse_tree_is_checked_too():
    text = DIFFER.replace("                g = self._fancy_replace(a, alo, ahi, b, blo, bhi)\n",
                          "                g = \n")
    store = DocumentStore()
    store.open(URI, "python", 1, text)
    snap = dataclasses.replace(store.snapshot(URI), tree=None)
    cursor = text.index("g = \n") + 4
    hole = hole_at_cursor(snap, cursor)
    assert prepare_check(snap, hole) is not None
    bad = "self._fancy_replace(a, alo, ahi, b, blo, bhi"
    got = postprocess(snap, hole, bad)
    assert got != bad
    assert got is None or first_error_line(text[:hole.start] + got + text[hole.end:]) is None


def test_a_window_that_cannot_parse_falls_back_to_the_whole_file():
    # lines around the hole that start inside a string: Python's parser cannot read the window, the file it can
    text = long_function().replace("        for name in names:\n",
                                   "        doc = '''\n" + "text\n" * 30 + "'''\n        for name in names:\n")
    rows = text.split("\n")
    at = next(i for i, r in enumerate(rows) if "for name in names" in r)
    snap, hole = snap_and_hole(text, at + 1, at + 4, tree=False)
    proposed = propose(snap, hole, "if name:", "if name")
    assert broken_by(snap, hole, proposed)
    assert judge(snap, hole, proposed) == ([], SYNTAX)


def test_a_proposal_no_check_can_judge_is_withheld():
    # the window cannot be read by Python's parser and the file is too big to read whole
    pad = "".join(f"v{i} = {i}\n" for i in range(FILE_MAX_CHARS // 8))
    text = pad + long_function().replace("        for name in names:\n",
                                         "        doc = '''\n" + "text\n" * 30 + "'''\n        for name in names:\n")
    rows = text.split("\n")
    at = next(i for i, r in enumerate(rows) if "for name in names" in r)
    snap, hole = snap_and_hole(text, at + 1, at + 4, tree=False)
    check = SyntaxCheck(snap, hole, whole_file=True)
    assert check.unchecked
    fine = propose(snap, hole, "self.make_entry(name, kind)", "self.make_entry(name, kind, 1)")
    assert judge(snap, hole, fine) == ([], UNCHECKED)
