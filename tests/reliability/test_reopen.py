"""A document's identity is its open, not its version (issue 21, item 2): a fill computed for one open of a document
is never applied to, shown in or offered for a later open of the same URI, even when the editor starts the new open
at version 1 again (a file replaced on disk, a branch switch). Every case writes the request and the reopen in ONE
write, as an editor does when the server is busy."""

from __future__ import annotations

import pytest

from .conftest import pos

OLD = "import os\n\ndef add(a, b):\n    return \n\nprint(add(1, 2))\n"
NEW = "import sys\n\nresult = 3\nprint(result)\nprint(result + 1)\n"  # (3, 11) is inside `result`
SETTINGS = {"steps": 4, "debounceMs": 0}


def reopen(srv, uri: str, close: bool) -> list[dict]:
    """didClose (when `close`) and didOpen of `uri`, again at version 1, with NEW (messages, not sent)."""
    srv.versions[uri] = 1
    opened = srv.notification("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "plaintext", "version": 1, "text": NEW}})
    closed = srv.notification("textDocument/didClose", {"textDocument": {"uri": uri}})
    return [closed, opened] if close else [opened]


def fill_hole(srv, uri: str, version: int | None = None) -> tuple[int, dict]:
    doc = {"uri": uri} if version is None else {"uri": uri, "version": version}
    return srv.request("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": doc, "position": pos(3, 11)}]})


@pytest.mark.parametrize("close", [True, False], ids=["close-open", "open-again"])
def test_fill_hole_then_a_reopen_in_one_write_applies_nothing(start_server, close):
    """The issue's reproduction: the old server sent applyEdit for version 1 at (3, 11) and the fill landed inside
    `result` of the new text (`print(resulARt)`), answering applied: true."""
    srv = start_server(SETTINGS)
    uri = "file:///reopened.txt"
    srv.open(uri, OLD)
    msg_id, request = fill_hole(srv, uri, version=1)
    srv.send(request, *reopen(srv, uri, close))
    result = srv.response(msg_id)["result"]
    assert result["applied"] is False and result["reason"] == "document changed", result
    assert srv.applied == []
    # The new open is served normally: the same command, sent now, lands in the new text at (3, 11).
    again_id, again = fill_hole(srv, uri, version=1)
    srv.send(again)
    assert srv.response(again_id)["result"]["applied"] is True
    (doc_edit,) = srv.applied[0]["edit"]["documentChanges"]
    assert doc_edit["textDocument"]["version"] == 1 and doc_edit["edits"][0]["range"]["start"] == pos(3, 11)


@pytest.mark.parametrize("close", [True, False], ids=["close-open", "open-again"])
@pytest.mark.parametrize("method", ["textDocument/inlineCompletion", "textDocument/completion"])
def test_a_keystroke_request_then_a_reopen_in_one_write_answers_nothing(start_server, method, close):
    srv = start_server(SETTINGS)
    uri = "file:///keystroke.txt"
    srv.open(uri, OLD)
    params = {"textDocument": {"uri": uri}, "position": pos(3, 11), "context": {"triggerKind": 1}}
    control_id, control = srv.request(method, params)
    srv.send(control)
    assert srv.response(control_id)["result"]["items"]  # alone, the request gets an item
    msg_id, request = srv.request(method, params)
    srv.send(request, *reopen(srv, uri, close))
    assert srv.response(msg_id)["result"] is None


def test_a_code_action_made_for_an_earlier_open_is_refused(start_server):
    """A code action carries the open it was made for (documentOpen) beside the version: run after a reopen at the
    same version 1, the command applies nothing."""
    srv = start_server(SETTINGS)
    uri = "file:///action.txt"
    srv.open(uri, OLD)
    action_msg = srv.call("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": {
        "start": pos(3, 11), "end": pos(3, 11)}, "context": {"diagnostics": []}})
    action = next(a for a in action_msg["result"] if "Fill" in a["title"])
    command = action["command"] if isinstance(action["command"], dict) else action  # CodeAction or Command
    assert command["arguments"][0]["textDocument"]["version"] == 1
    srv.send(*reopen(srv, uri, close=True))
    result = srv.call("workspace/executeCommand", {"command": command["command"], "arguments": command["arguments"]})
    assert result["result"] == {**result["result"], "applied": False, "reason": "document changed"}
    assert srv.applied == []


def test_a_bad_document_open_or_force_argument_is_invalid_params(start_server):
    srv = start_server(SETTINGS)
    uri = "file:///bad.txt"
    srv.open(uri, OLD)
    for key, value in (("documentOpen", "1"), ("documentOpen", -1), ("force", "yes"), ("force", 1)):
        error = srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
            {"textDocument": {"uri": uri}, "position": pos(0, 0), key: value}]})["error"]
        assert error["code"] == -32602 and key in error["message"], (key, value, error)
    assert srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": {"uri": uri}, "position": pos(0, 0)}]})["result"]["applied"] in (True, False)  # still answers
