"""The syntax gate (issue 11, items 9 and 10): a shown fill must not make code that CPython's parser accepted stop
parsing, where tree-sitter is lenient (indentation, empty bodies); and post-processing gives the same answer for the
same snapshot and engine text, whether the gate's baseline was prepared beside the engine or not, on a busy machine
or an idle one."""

from __future__ import annotations

import random
import time

import pytest

from dg_lsp.documents import Document, Snapshot
from dg_lsp.fill.edits import postprocess
from dg_lsp.fill.holes import hole_at_cursor, hole_for_selection
from dg_lsp.fill.syntax import (
    COMMAND_PARSE_BYTES,
    KEYSTROKE_PARSE_BYTES,
    STATEMENT_MAX_CHARS,
    WINDOW_MAX_CHARS,
    SyntaxCheck,
    error_starts,
    first_error_line,
    prepare_check,
)

# The case: the rest of the `def` line (a comment) cut away, the cursor after the colon and two spaces.
VERSION_STR = ('import sys\n\n\ndef version_str(version):  \n    """The version as a dotted string."""\n'
               '    return ".".join(str(v) for v in version)\n\n\nprint(version_str(sys.version_info))\n')


def snapshot(text: str, language: str = "python") -> Snapshot:
    return Document("file:///t.py", language, 1, text).snapshot()


def with_fill(snap: Snapshot, hole, fill: str) -> str:
    return snap.text[:hole.start] + fill + snap.text[hole.end:]


def test_a_fill_that_turns_a_def_into_a_one_liner_above_its_body_is_rejected():
    snap = snapshot(VERSION_STR)
    hole = hole_at_cursor(snap, VERSION_STR.index("):  ") + 4)
    broken = with_fill(snap, hole, '""')
    assert first_error_line(VERSION_STR) is None and first_error_line(broken) == 5  # IndentationError below
    edited = snapshot(broken)
    assert len(error_starts(edited.tree)) == len(error_starts(snap.tree))  # tree-sitter alone lets it through
    assert postprocess(snap, hole, '""') is None
    assert postprocess(snap, hole, "# returns a str") == "# returns a str"  # a comment there is fine


@pytest.mark.parametrize("marked,fill,kept", [
    # an emptied body is an error for CPython (tree-sitter accepts `def f():` with no body)
    ("def f(x):\n    |\n", "pass", "pass"),
    # a dedent that leaves the rest of the block orphaned
    ("def f(x):\n    y = |\n    return y\n", "x\n  z = 1", "x"),
    # a fill that closes what the baseline left open is welcome although the baseline does not parse
    ("total = compute(|\nprint(total)\n", "1, 2)", "1, 2)"),
])
def test_cpython_parser_cases(marked, fill, kept):
    cursor = marked.index("|")
    text = marked[:cursor] + marked[cursor + 1:]
    snap = snapshot(text)
    assert postprocess(snap, hole_at_cursor(snap, cursor), fill) == kept


def test_a_window_broken_above_the_hole_leaves_the_decision_to_tree_sitter():
    text = "def f(:\n    return 1\n\n\ndef g(x):\n    y = x\n    return y\n"
    snap = snapshot(text)
    hole = hole_at_cursor(snap, text.index("y = x") + len("y = x"))
    check = SyntaxCheck(snap, hole)
    assert not check.adds_errors(" + 1")


def test_the_gate_reads_a_bounded_window_on_a_huge_definition():
    body = "".join(f"    v{i} = [{i}, {i + 1}]\n" for i in range(5_000))
    text = "def huge():\n" + body + "    return v0\n"
    snap = snapshot(text)
    hole = hole_at_cursor(snap, text.index("    v2500 = ") + len("    v2500 = "))
    check = SyntaxCheck(snap, hole)
    assert check.window[1] - check.window[0] <= WINDOW_MAX_CHARS
    check.adds_errors("[1, 2]")
    assert check.parsed_bytes <= 3 * WINDOW_MAX_CHARS + 100  # tree-sitter's baseline and fill, Python's fill


# ---- determinism ------------------------------------------------------------------------------------------------

SOURCE = ('import os\n\n\nclass Store:\n    def __init__(self, root):\n        self.root = root\n'
          '        self.items = {}\n\n    def get(self, key, default=None):\n        value = self.items.get(key)\n'
          '        if value is None:\n            return default\n        return value\n\n'
          '    def put(self, key, value):\n        self.items[key] = (value, len(value))\n\n\n'
          'def main(argv):\n    store = Store(os.getcwd())\n    for arg in argv:\n        store.put(arg, arg * 2)\n'
          '    return store\n')
TOKENS = ["x", "self", ".", "items", "(", ")", "[", "]", ",", " ", ":", "\n", "    ", "return", "=", "1", '"', "'",
          "+", "if", "else", "None", "key", "value", "{", "}", "#", "lambda", "\n        "]


def raw_fills(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(TOKENS) for _ in range(rng.randrange(1, 24))) for _ in range(n)]


def cursors(text: str, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(0, len(text) + 1) for _ in range(n)]


def test_postprocessing_is_the_same_with_or_without_a_prepared_baseline():
    snap = snapshot(SOURCE)
    for i, cursor in enumerate(cursors(SOURCE, 40, seed=1)):
        hole = hole_at_cursor(snap, cursor)
        for raw in raw_fills(10, seed=i):
            assert postprocess(snap, hole, raw, prepare_check(snap, hole)) == postprocess(snap, hole, raw), raw


def test_postprocessing_does_not_depend_on_the_clock(monkeypatch):
    """The same fills on a machine where every clock read says a second has passed."""
    snap = snapshot(SOURCE)
    cases = [(hole_at_cursor(snap, c), raw) for i, c in enumerate(cursors(SOURCE, 25, seed=2))
             for raw in raw_fills(6, seed=100 + i)]
    calm = [postprocess(snap, hole, raw) for hole, raw in cases]
    now = [0.0]

    def slow_clock() -> float:
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(time, "perf_counter", slow_clock)
    assert [postprocess(snap, hole, raw) for hole, raw in cases] == calm


def test_a_rewritten_selection_is_checked_by_cpython_too():
    text = "def f(a):\n    b = a + 1\n    return b\n"
    snap = snapshot(text)
    hole = hole_for_selection(snap, text.index("    b ="), text.index("\n    return"), widen=False)
    assert postprocess(snap, hole, "b = a * 2") == "    b = a * 2"
    assert postprocess(snap, hole, "b = a * 2\n        c = b") == "    b = a * 2"  # not the unexpected indent


# ---- a window cut inside a literal hundreds of lines long (encodings/cp857.py, cp1026.py) ----------------------

ENCODING_MAP = ("import codecs\n\nencoding_map = {\n"
                + "".join(f"    0x{i:04x}: 0x{i:04x},     #  ENTRY {i}\n" for i in range(300)) + "}\n")
DECODING_TABLE = ("decoding_table = (\n"
                  + "".join(f"    '\\x{i:02x}'     #  0x{i:02X} -> CONTROL\n" for i in range(256)) + ")\n")


def fill_at(text: str, before: str, cut: str, fill: str, budget: int) -> tuple[str | None, str, str]:
    """(what post-processing keeps of `fill`, the document, the document with it) at the cursor after `before`,
    `cut` removed there first (the text the user is retyping)."""
    cursor = text.index(before) + len(before)
    doc = text[:cursor] + text[cursor + len(cut):]
    snap = snapshot(doc)
    hole = hole_at_cursor(snap, cursor)
    kept = postprocess(snap, hole, fill, None, budget)
    return kept, doc, doc if kept is None else with_fill(snap, hole, kept)


@pytest.mark.parametrize("budget", [KEYSTROKE_PARSE_BYTES, COMMAND_PARSE_BYTES])
@pytest.mark.parametrize("text,before,cut,fill", [
    # an invalid hex literal as a value 150 lines into a 300-line dict: the window starts inside the dict
    (ENCODING_MAP, "    0x0096: ", "", "0x00ator,"),
    (ENCODING_MAP, "    0x0096: 0x0096", "", "ator"),
    # a truncated \u escape in a string of a 256-line tuple (tree-sitter does not check escapes at all)
    (DECODING_TABLE, "    '\\x96", "", "\\u00"),
])
def test_a_fill_that_breaks_a_huge_literal_beyond_the_window_is_rejected(text, before, cut, fill, budget):
    kept, doc, _ = fill_at(text, before, cut, fill, budget)
    assert first_error_line(doc) is None
    assert first_error_line(doc.replace(before, before + fill, 1)) is not None  # the fill breaks the file
    assert kept is None


@pytest.mark.parametrize("text,before,fill", [
    (ENCODING_MAP, "    0x0096: 0x0096,", "  # fine"),
    (DECODING_TABLE, "    '\\x96", "\\x41"),
])
def test_a_fill_that_keeps_a_huge_literal_parsing_is_kept(text, before, fill):
    kept, _, after = fill_at(text, before, "", fill, KEYSTROKE_PARSE_BYTES)
    assert kept == fill and first_error_line(after) is None


def test_the_statement_around_the_hole_is_checked_only_when_the_window_cuts_it_and_it_is_small_enough():
    snap = snapshot(ENCODING_MAP)  # the window, lines inside the literal, is backed by the whole statement
    check = SyntaxCheck(snap, hole_at_cursor(snap, ENCODING_MAP.index("    0x0096: ") + 12))
    assert check.statement is not None and not check.statement.tree  # Python's parser alone
    assert check.statement.window == (ENCODING_MAP.index("encoding_map"), len(ENCODING_MAP) - 1)
    small = "import codecs\n\nencoding_map = {\n    0x0001: 0x0001,\n}\n"
    snap = snapshot(small)
    assert SyntaxCheck(snap, hole_at_cursor(snap, small.index("0x0001,"))).statement is None  # the window is whole
    body = "".join(f"    v{i} = [{i}, {i + 1}]\n" for i in range(200))  # a function too long for one window
    text = "def long():\n" + body + "    return v0\n"
    snap = snapshot(text)
    check = SyntaxCheck(snap, hole_at_cursor(snap, text.index("    v100 = ") + 11))
    assert check.statement is not None and not check.statement.tree
    assert check.statement.window == (text.index("    v100 = "), text.index("\n    v101 = "))
    n = STATEMENT_MAX_CHARS // 20  # a literal longer than the cap: the window alone judges, its cost bounded
    big = "m = {\n" + "".join(f"    0x{i:06x}: 0x{i:06x},  # e\n" for i in range(n)) + "}\n"
    snap = snapshot(big)
    check = SyntaxCheck(snap, hole_at_cursor(snap, big.index(f"    0x{n // 2:06x}: ") + 14))
    assert check.statement is None
    check.adds_errors("0x1,")
    assert check.parsed_bytes <= 3 * WINDOW_MAX_CHARS + 100


def test_a_hole_in_a_method_of_a_long_class_is_checked_in_that_method():
    """The line's indent belongs to the class body, not to the `def` on it: the window is the method (complete code,
    which Python's parser can judge), not lines around the hole (imaplib.py's `def getacl(|)`)."""
    methods = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(60))
    text = "class Big:\n" + methods + "    def getacl(self, mailbox):\n        return mailbox\n"
    cursor = text.index("def getacl(") + len("def getacl(")
    doc = text[:cursor] + text[cursor + len("self, mailbox"):]
    snap = snapshot(doc)
    hole = hole_at_cursor(snap, cursor)
    check = SyntaxCheck(snap, hole)
    assert check.window == (doc.index("    def getacl("), len(doc) - 1) and check.statement is None
    assert postprocess(snap, hole, "self,sep, dict parts") == "self,sep, dict"  # not `(self,sep, dict parts):`
    assert postprocess(snap, hole, "self, sep") == "self, sep"
