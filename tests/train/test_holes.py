"""Hole extraction golden cases on a small Python file."""

import random

from engine.train.holes import FileHoles, error_count, python_parser

SRC = """def f(a, b):
    x = g(a, [1, 2])
    if x:
        return b
    return None
"""


def _mids(kind, src=SRC):
    fh = FileHoles(src, python_parser())
    return [src[s:e] for s, e in fh.candidates[kind]]


def test_rest_of_line_cuts_at_tokens_and_stops_at_line_end():
    mids = _mids("rest_of_line")
    assert "x = g(a, [1, 2])" in mids and "g(a, [1, 2])" in mids and "[1, 2])" in mids
    assert all("\n" not in m for m in mids)
    assert ")" not in mids  # never a hole that starts on a closing bracket


def test_statement_and_block_and_bracket():
    assert _mids("statement") == [
        "def f(a, b):\n    x = g(a, [1, 2])\n    if x:\n        return b\n    return None",
        "x = g(a, [1, 2])",
        "if x:\n        return b",
        "return b",
        "return None",
    ]
    assert _mids("block_body") == ["x = g(a, [1, 2])\n    if x:\n        return b\n    return None", "return b"]
    assert _mids("bracket") == ["a, b", "a, [1, 2]", "1, 2"]


def test_non_ascii_offsets_are_characters():
    src = 's = "héllo 😀"\nt = f(s, "ü")\n'
    assert '"héllo 😀"' in _mids("rest_of_line", src)
    assert 's, "ü"' in _mids("bracket", src)


def test_random_span_is_deterministic():
    fh = FileHoles(SRC, python_parser())
    a = [fh.sample("random_span", random.Random(3)) for _ in range(3)]
    b = [fh.sample("random_span", random.Random(3)) for _ in range(3)]
    assert a == b and all(h is None or 0 <= h.start < h.end <= len(SRC) for h in a)


def test_error_count():
    p = python_parser()
    assert error_count(p, SRC) == 0
    assert error_count(p, SRC.replace("[1, 2]", "[1, 2")) > 0
