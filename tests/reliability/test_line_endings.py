"""Line endings as LSP defines them: "\\n", "\\r\\n" and a lone "\\r" each end a line (issue 11, item 7). The
document store's text, line index and tree after incremental edits equal a from-scratch rebuild, and the server
reads positions the way the client wrote them."""

from __future__ import annotations

import pytest

from dg_lsp.documents import Document, line_starts, offset_at, position_at

from .conftest import pos
from .test_fuzz_edits import assert_same_as_rebuild

ISSUE = "a = 1\rb = 2\rc = 3\n"


def change(l0: int, c0: int, l1: int, c1: int, text: str) -> dict:
    return {"range": {"start": pos(l0, c0), "end": pos(l1, c1)}, "text": text}


def test_the_issue_case_edits_line_one():
    doc = Document("file:///cr.py", "python", 1, ISSUE)
    assert doc.starts.tolist() == [0, 6, 12, 18]  # four lines: three "\r"/"\n" breaks
    doc.apply_changes([change(1, 0, 1, 0, "x = 0\r")], 2)
    assert doc.text == "a = 1\rx = 0\rb = 2\rc = 3\n"  # at line 1, not at the end of the file
    assert_same_as_rebuild(doc, "a = 1\rx = 0\rb = 2\rc = 3\n")
    doc.apply_changes([change(2, 4, 3, 1, "")], 3)  # across a lone "\r"
    assert_same_as_rebuild(doc, "a = 1\rx = 0\rb =  = 3\n")


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_positions_with_every_line_ending(encoding):
    text = "é\r😀x\r\n日\nlast"
    starts = line_starts(text)
    assert position_at(text, text.index("x"), encoding, starts)[0] == 1
    assert position_at(text, text.index("日"), encoding, starts) == (2, 0)
    assert position_at(text, text.index("last"), encoding, starts) == (3, 0)
    assert offset_at(text, 1, 0, encoding, starts) == text.index("😀")
    assert offset_at(text, 0, 99, encoding, starts) == text.index("\r")  # past a line's end: before its break
    assert offset_at(text, 1, 99, encoding, starts) == text.index("\r\n")
    assert offset_at(text, 4, 0, encoding, starts) == len(text)


@pytest.mark.parametrize("before,edit,after", [
    ("a\nb", change(0, 1, 0, 1, "\r"), "a\r\nb"),  # a "\r" inserted before a "\n": one break, not two
    ("a\rb", change(1, 0, 1, 0, "\n"), "a\r\nb"),  # a "\n" inserted after a "\r": one break
    ("a\rXY\nb", change(1, 0, 1, 2, ""), "a\r\nb"),  # the text between them deleted: they join
    ("a\r\nb", change(0, 1, 1, 0, "\rZ\n"), "a\rZ\nb"),  # a break replaced by two
    ("a\r\r\n\rb", change(1, 0, 3, 0, "\n"), "a\r\nb"),
])
def test_edits_that_join_or_split_line_breaks(before, edit, after):
    doc = Document("file:///t.py", "python", 1, before)
    doc.apply_changes([edit], 2)
    assert doc.text == after
    assert doc.starts.tolist() == line_starts(after).tolist()
    assert_same_as_rebuild(doc, after)


def test_the_server_reads_lone_cr_lines(start_server):
    """The issue's document through the server: an edit at (1, 0), then a fill at the end of line 1; the server's
    line 1 is the client's line 1 (before, "\\r" was not a break and line 1 did not exist for the server)."""
    srv = start_server({"steps": 4, "debounceMs": 0})
    uri = "file:///cr.txt"
    srv.open(uri, ISSUE)
    srv.send(srv.change(uri, (1, 0), (1, 0), "X"))
    reply = srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": {"uri": uri}, "position": pos(1, 6)}]})
    assert reply["result"]["applied"] is True, reply
    (doc_edit,) = srv.applied[0]["edit"]["documentChanges"]
    assert doc_edit["textDocument"]["version"] == 2
    assert doc_edit["edits"][0]["range"] == {"start": pos(1, 6), "end": pos(1, 6)}  # "Xb = 2" ends at 6
