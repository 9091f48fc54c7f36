"""Holes: golden cases for every kind in Python, JS/TS, Rust, Go (and C/Java), `|` marks the cursor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dg_lsp.documents import Document, Snapshot
from dg_lsp.fill.holes import KINDS, Hole, hole_at_cursor, hole_for_selection, indent_unit


def snap_of(language_id: str, marked: str) -> tuple[Snapshot, int]:
    offset = marked.index("|")
    text = marked[:offset] + marked[offset + 1 :]
    return Document("file:///t", language_id, 1, text).snapshot(), offset


def hole(language_id: str, marked: str) -> Hole:
    snap, offset = snap_of(language_id, marked)
    h = hole_at_cursor(snap, offset)
    assert h.start == offset and h.replaced == snap.text[h.start : h.end] and h.end >= h.start
    return h


CASES = [
    # (language, source with |, kind, replaced, max_lines==1?)
    # --- Python
    ("python", "x = foo(a|, b)\n", "rest_of_line", "", True),
    ("python", "def f(x):\n    return x|\n", "rest_of_line", "", True),
    ("python", "def f(x):\n    y = |\n", "statement", "", False),
    ("python", "def f(x):\n    return |\n", "statement", "", False),
    ("python", "def f(x):|\n\nprint(1)\n", "block_body", "", False),
    ("python", "class A:\n    def m(self):\n        |\n\n    def n(self):\n        pass\n", "block_body", "",
     False),
    ("python", "if x:|\n    y = 1\n", "statement", "", False),
    ("python", "foo(|)\n", "bracket_expr", "", True),
    ("python", "xs = [1, 2, |]\n", "bracket_expr", "", True),
    ("python", "d = {'a': 1, |}\n", "bracket_expr", "", True),
    ("python", "xs = [\n    1,\n    |\n]\n", "bracket_expr", "", False),
    ("python", "def f():\n    x = 1\n    |\n    return x\n", "statement", "", False),
    ("python", 's = "abc|def"\n', "rest_of_line", "", True),
    ("python", "x = 1  # note|\n", "rest_of_line", "", True),
    # --- JavaScript / TypeScript
    ("javascript", "function f() {|\n}\n", "block_body", "", False),
    ("javascript", "function f() {|}\n", "block_body", "", False),
    ("javascript", "function f() {\n  |\n}\n", "block_body", "", False),
    ("javascript", "function f() {\n  |\n\n\n}\n", "block_body", "\n\n", False),
    ("javascript", "const o = {|};\n", "bracket_expr", "", True),
    ("javascript", "foo(a, |);\n", "bracket_expr", "", True),
    ("javascript", "let y = |\n", "statement", "", False),
    ("javascript", "let y = foo(|a);\n", "rest_of_line", "", True),
    ("javascript", "console.log(x)|\n", "rest_of_line", "", True),
    ("typescript", "function add(a: number, b: number): number {|}\n", "block_body", "", False),
    ("typescript", "const xs: number[] = [|];\n", "bracket_expr", "", True),
    ("typescript", "interface P {\n  |\n}\n", "block_body", "", False),
    ("typescriptreact", "const v = f(|);\n", "bracket_expr", "", True),
    # --- Rust
    ("rust", "fn main() {\n    let v = |\n}\n", "statement", "", False),
    ("rust", "fn main() {|\n}\n", "block_body", "", False),
    ("rust", "fn main() {\n    println!(\"{}\", |);\n}\n", "bracket_expr", "", True),
    ("rust", "fn main() {\n    let v = vec![1, 2];|\n}\n", "rest_of_line", "", True),
    ("rust", "fn main() {\n    foo(|bar);\n}\n", "rest_of_line", "", True),
    # --- Go
    ("go", "package main\n\nfunc main() {\n\t|\n}\n", "block_body", "", False),
    ("go", "package main\n\nfunc main() {\n\tx := |\n}\n", "statement", "", False),
    ("go", "package main\n\nfunc main() {\n\tfmt.Println(|)\n}\n", "bracket_expr", "", True),
    ("go", "package main\n\nfunc main() {\n\tfmt.Println(|x)\n}\n", "rest_of_line", "", True),
    # --- C / Java
    ("c", "int main(void) {\n    |\n}\n", "block_body", "", False),
    ("java", "class A {\n    void m() {|}\n}\n", "block_body", "", False),
    # --- no grammar
    ("plaintext", "hello |world\n", "rest_of_line", "", True),
    ("plaintext", "hello world|  \n", "line", "  ", True),
]


@pytest.mark.parametrize("language_id,marked,kind,replaced,one_line", CASES)
def test_hole_kinds(language_id, marked, kind, replaced, one_line):
    h = hole(language_id, marked)
    assert (h.kind, h.replaced) == (kind, replaced)
    assert (h.max_lines == 1) == one_line


def test_block_body_indent():
    assert hole("python", "class A:\n    def m(self):|\n").indent == " " * 8
    assert hole("go", "package main\n\nfunc main() {|}\n").indent == "\t"
    assert hole("javascript", "if (x) {\n  y();\n}\nfunction f() {|}\n").indent == "  "


def test_block_body_multiline_swallow_keeps_closer():
    snap, offset = snap_of("rust", "fn f() {\n    |\n    \n}\n")
    h = hole_at_cursor(snap, offset)
    assert h.kind == "block_body" and h.replaced == "\n    "
    assert snap.text[h.end :] == "\n}\n"


def test_non_empty_block_is_not_block_body():
    assert hole("javascript", "function f() {|\n  return 1;\n}\n").kind == "statement"
    assert hole("python", "def f():\n    |\n    return 1\n").kind == "statement"


def test_non_ascii_offsets():
    h = hole("python", "s = '日本😀'\nfoo(|)\n")
    assert h.kind == "bracket_expr"
    h = hole("javascript", "const s = '😀';\nfunction f() {|}\n")
    assert h.kind == "block_body"


def test_cursor_out_of_range_and_empty_doc():
    snap = Document("file:///t", "python", 1, "").snapshot()
    assert hole_at_cursor(snap, 0).kind == "statement"
    snap = Document("file:///t", "python", 1, "x = 1\n").snapshot()
    h = hole_at_cursor(snap, 999)
    assert h.start == len(snap.text)


def test_large_file_falls_back_to_lines():
    text = "x = 1\n" * 400_000  # 2.4 MB: over the tree cap
    snap = Document("file:///t", "python", 1, text + "y = ").snapshot()
    assert snap.tree is None
    h = hole_at_cursor(snap, len(snap.text))
    assert h.kind == "line"


def test_selection_plain_and_widened():
    snap, _ = snap_of("python", "|def f(a, b):\n    total = a + b\n    return total\n")
    text = snap.text
    s = text.index("tal = a")
    h = hole_for_selection(snap, s, s + 6, widen=False)
    assert (h.kind, h.replaced) == ("selection", "tal = ")
    h = hole_for_selection(snap, s, s + 6, widen=True)
    assert h.replaced == "total = a + b"
    s2 = text.index("otal = a")
    e2 = text.index("urn total") + 3
    h = hole_for_selection(snap, s2, e2, widen=True)
    assert h.replaced == "total = a + b\n    return total"
    assert h.indent == "    "
    h = hole_for_selection(snap, e2, s2, widen=False)  # reversed range
    assert h.start == s2
    h = hole_for_selection(snap, text.index("ta"), text.index("ta") + 1, widen=True)
    assert h.replaced == "total"


def test_selection_widen_without_grammar():
    snap, _ = snap_of("plaintext", "|alpha beta\ngamma delta\nomega\n")
    h = hole_for_selection(snap, 3, 14, widen=True)
    assert h.replaced == "alpha beta\ngamma delta"


def test_indent_unit():
    assert indent_unit("a:\n  b\n    c\n") == "  "
    assert indent_unit("a {\n\tb\n}\n") == "\t"
    assert indent_unit("x = 1\n") == "    "


# ---- invariants on arbitrary text ----

PIECES = ["x", " ", "\n", "    ", "\t", "(", ")", "[", "]", "{", "}", ":", "=", ",", ";", "1", "if", "def",
          "return", "fn", "func", '"', "'", "#", "//", "😀", "日本", "é"]


@settings(max_examples=30, deadline=None)
@given(
    language_id=st.sampled_from(["python", "javascript", "typescript", "rust", "go", "c", "plaintext"]),
    pieces=st.lists(st.sampled_from(PIECES), max_size=40),
)
def test_cursor_holes_never_replace_code(language_id, pieces):
    text = "".join(pieces)
    snap = Document("file:///t", language_id, 1, text).snapshot()
    for offset in range(len(text) + 1):
        h = hole_at_cursor(snap, offset)
        assert h.kind in KINDS and h.start == offset <= h.end <= len(text)
        assert h.replaced == text[h.start : h.end] and not h.replaced.strip()
        assert h.max_lines >= 1
        if h.max_lines == 1:
            assert "\n" not in h.replaced


@settings(max_examples=60, deadline=None)
@given(
    language_id=st.sampled_from(["python", "javascript", "rust", "go", "plaintext"]),
    pieces=st.lists(st.sampled_from(PIECES), max_size=40),
    a=st.floats(0, 1),
    b=st.floats(0, 1),
)
def test_widened_selection_covers_the_selection(language_id, pieces, a, b):
    text = "".join(pieces)
    snap = Document("file:///t", language_id, 1, text).snapshot()
    start, end = sorted((int(a * len(text)), int(b * len(text))))
    h = hole_for_selection(snap, start, end, widen=True)
    seg = text[start:end]
    if seg.strip():
        assert h.start <= start + len(seg) - len(seg.lstrip()) and h.end >= end - len(seg) + len(seg.rstrip())
    assert h.replaced == text[h.start : h.end] and h.kind == "selection"


def test_strings_and_comments_are_rest_of_line():
    for marked in ('s = "abc|"\n', "s = f'{x}|'\n", '"""doc|\nmore"""\n', "# comment|\nx = 1\n"):
        assert hole("python", marked).kind == "rest_of_line", marked
    assert hole("javascript", "const s = `a ${b} |`;\n").kind == "rest_of_line"
    assert hole("rust", "fn f() {\n    // todo|\n}\n").kind == "rest_of_line"


def _indent_unit_by_lines(text: str, default: str = "    ") -> str:
    """indent_unit as specified: every line of the first 20,000 characters (str.splitlines), in order."""
    step = 0
    for line in text[:20_000].splitlines():
        ws = line[: len(line) - len(line.lstrip(" \t"))]
        if not ws or not line.strip():
            continue
        if ws.startswith("\t"):
            return "\t"
        step = len(ws) if step == 0 else min(step, len(ws))
    return " " * step if step in (2, 3, 4, 8) else default


def test_indent_unit_reads_lines_as_splitlines_does():
    import random
    import sysconfig
    from pathlib import Path

    rng = random.Random(0)
    pieces = [" ", "  ", "\t", "\n", "\n", "x", "y", "\r", "\r\n", "\x0c", "\x1f", "\x1c", "\u00a0", "\u2028", "é"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(20_000)]
    lib = Path(sysconfig.get_paths()["stdlib"])
    texts += [p.read_text(encoding="utf-8", errors="replace")[cut:] for p in sorted(lib.glob("*.py"))[:150]
              for cut in (0, 7_000)]
    texts += ["\tdef f():\n\t\treturn 1\n", "def f():\n  x = 1\n", " " * 30_000 + "\n  x\n", "a\n   b\n      c\n"]
    for text in texts:
        assert indent_unit(text) == _indent_unit_by_lines(text), repr(text[:80])
    assert indent_unit("def f():\n  x = 1\n") == "  " and indent_unit("\tdef f():\n\t\tx\n") == "\t"


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_a_selection_ending_at_a_line_start_keeps_that_line_break(eol):
    """Whole lines selected (start of line 1 to the start of line 3): the rewrite replaces lines 1-2 and the break
    before line 3 stays, so a fill without a trailing newline does not join line 3 onto it (found by the eglot tier)."""
    text = eol.join(["a = 1", "b = 2", "c = 3", "d = 4", ""])
    snap = Document("file:///t.py", "python", 1, text).snapshot()
    start, end = snap.starts[1], snap.starts[3]
    h = hole_for_selection(snap, int(start), int(end))
    assert h.replaced == "b = 2" + eol + "c = 3" and text[h.end:].startswith(eol + "d = 4")
    whole = hole_for_selection(snap, 0, len(text))  # a selection to the end of a text ending with a break
    assert whole.replaced == text[: -len(eol)]
    assert hole_for_selection(snap, int(start), int(start) + 1).replaced == "b"  # not at a line start: as it was
