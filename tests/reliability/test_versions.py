"""A request and the didChange after it, read in one batch: the request is answered for the version its positions
were read from (issue 11, item 1). Every case writes the request and the didChange in ONE write, as a client does
when the server is busy, and checks what the editor would see: no applyEdit at stale coordinates, no inline item
for a document that has changed since."""

from __future__ import annotations

from .conftest import pos

ISSUE_DOC = "import os\n\ndef add(a, b):\n    return \n\nprint(add(1, 2))\n"
SETTINGS = {"steps": 4, "debounceMs": 0}


def fill_hole(srv, uri: str, line: int, char: int, version: int | None = None) -> tuple[int, dict]:
    doc = {"uri": uri} if version is None else {"uri": uri, "version": version}
    return srv.request("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": doc, "position": pos(line, char)}]})


def inline(srv, uri: str, line: int, char: int) -> tuple[int, dict]:
    return srv.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": pos(line, char), "context": {"triggerKind": 1}})


def test_fill_hole_then_an_edit_in_one_write_applies_nothing(start_server):
    """The issue's reproduction: fillHole at (3, 11) for version 1, then a didChange (version 2) inserting two lines
    at the top. The fill was read against version 1; by the time it is ready the document is version 2."""
    srv = start_server(SETTINGS)
    uri = "file:///issue.py"
    srv.open(uri, ISSUE_DOC, "python")
    msg_id, request = fill_hole(srv, uri, 3, 11)
    srv.send(request, srv.change(uri, (0, 0), (0, 0), "\n\n"))
    result = srv.response(msg_id)["result"]
    assert result["applied"] is False and result["reason"] == "document changed", result
    assert srv.applied == []  # the old server sent applyEdit for version 2 at (3, 0): an empty line by then


def test_without_the_edit_the_same_fill_lands_where_it_was_asked(start_server):
    """The control: the same request alone is applied, for version 1, at (3, 11). ("plaintext": the tiny random
    model's fill is not syntax-checked away, so an edit is always made.)"""
    srv = start_server(SETTINGS)
    uri = "file:///issue.txt"
    srv.open(uri, ISSUE_DOC, "plaintext")
    msg_id, request = fill_hole(srv, uri, 3, 11)
    srv.send(request)
    assert srv.response(msg_id)["result"]["applied"] is True
    (edit,) = srv.applied
    (doc_edit,) = edit["edit"]["documentChanges"]
    assert doc_edit["textDocument"]["version"] == 1
    assert doc_edit["edits"][0]["range"]["start"] == pos(3, 11)


def test_an_edit_then_a_fill_in_one_write_is_read_in_that_order(start_server):
    """The other order in one batch: the didChange first, so the request's positions are version 2's."""
    srv = start_server(SETTINGS)
    uri = "file:///order.txt"
    srv.open(uri, ISSUE_DOC, "plaintext")
    change = srv.change(uri, (0, 0), (0, 0), "\n\n")
    msg_id, request = fill_hole(srv, uri, 5, 11)
    srv.send(change, request)
    assert srv.response(msg_id)["result"]["applied"] is True
    (doc_edit,) = srv.applied[0]["edit"]["documentChanges"]
    assert doc_edit["textDocument"]["version"] == 2
    assert doc_edit["edits"][0]["range"]["start"] == pos(5, 11)


def test_rewrite_selection_then_an_edit_in_one_write_applies_nothing(start_server):
    srv = start_server(SETTINGS)
    uri = "file:///rewrite.txt"
    srv.open(uri, ISSUE_DOC, "plaintext")
    msg_id, request = srv.request("workspace/executeCommand", {"command": "dg.rewriteSelection", "arguments": [
        {"textDocument": {"uri": uri}, "range": {"start": pos(2, 0), "end": pos(3, 11)}}]})
    srv.send(request, srv.change(uri, (0, 0), (0, 0), "# a new first line\n"))
    result = srv.response(msg_id)["result"]
    assert result == {**result, "applied": False, "reason": "document changed"}
    assert srv.applied == []


def test_inline_completion_then_an_edit_in_one_write_answers_nothing(start_server):
    srv = start_server(SETTINGS)
    uri = "file:///inline.txt"
    srv.open(uri, ISSUE_DOC, "plaintext")
    control_id, control = inline(srv, uri, 3, 11)
    srv.send(control)
    assert srv.response(control_id)["result"]["items"]  # alone, the request gets an item
    msg_id, request = inline(srv, uri, 3, 11)
    srv.send(request, srv.change(uri, (0, 0), (0, 0), "\n\n"))
    assert srv.response(msg_id)["result"] is None


def test_completion_then_an_edit_in_one_write_answers_nothing(start_server):
    srv = start_server(SETTINGS)
    uri = "file:///completion.txt"
    srv.open(uri, ISSUE_DOC, "plaintext")
    params = {"textDocument": {"uri": uri}, "position": pos(3, 11)}
    control_id, control = srv.request("textDocument/completion", params)
    srv.send(control)
    assert srv.response(control_id)["result"]["items"]
    msg_id, request = srv.request("textDocument/completion", params)
    srv.send(request, srv.change(uri, (0, 0), (0, 0), "\n\n"))
    assert srv.response(msg_id)["result"] is None


def test_a_code_action_made_for_an_older_version_is_refused(start_server):
    """Code actions carry the document version they were made for; run after an edit, the command applies
    nothing."""
    srv = start_server(SETTINGS)
    uri = "file:///action.txt"
    srv.open(uri, ISSUE_DOC, "plaintext")
    msg_id, request = srv.request("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": {
        "start": pos(3, 11), "end": pos(3, 11)}, "context": {"diagnostics": []}})
    srv.send(request, srv.change(uri, (0, 0), (0, 0), "\n\n"))
    (action,) = srv.response(msg_id)["result"]
    assert action["arguments"][0]["textDocument"]["version"] == 1
    result = srv.call("workspace/executeCommand", {"command": action["command"], "arguments": action["arguments"]})
    assert result["result"]["applied"] is False and result["result"]["reason"] == "document changed"
    assert srv.applied == []
    fresh_id, fresh = fill_hole(srv, uri, 5, 11, version=2)  # the same command for the current version works
    srv.send(fresh)
    assert srv.response(fresh_id)["result"]["applied"] is True
