"""Invalid Params, not internal errors (issue 11, item 6): out-of-range positions in commands and requests get
-32602 with a short message (no traceback, no server paths), and documents holding lone surrogates are served."""

from __future__ import annotations

import pytest

from dg_lsp.documents import Document

from .conftest import ROOT, pos

TEXT = "alpha beta\ngamma\n"
BIG = 2**31  # one past LSP's uinteger


def assert_invalid_params(reply: dict, *words: str) -> None:
    err = reply.get("error")
    assert err is not None and err["code"] == -32602, reply
    message = err["message"]
    assert len(message) < 300 and "Traceback" not in message, message
    assert str(ROOT) not in message and ".py" not in message and "site-packages" not in message, message
    for w in words:
        assert w in message, message


@pytest.fixture
def srv(start_server):
    server = start_server({"steps": 2, "debounceMs": 0})
    server.open("file:///a.txt", TEXT)
    return server


def fill(srv, position: dict) -> dict:
    return srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": {"uri": "file:///a.txt"}, "position": position}]})


def test_positions_out_of_range_in_commands(srv):
    assert_invalid_params(fill(srv, pos(BIG, 0)), "dg.fillHole", "position")
    assert_invalid_params(fill(srv, pos(0, BIG)), "dg.fillHole")
    assert_invalid_params(fill(srv, pos(-1, 0)), "dg.fillHole")
    assert_invalid_params(fill(srv, pos(7, 0)), "outside the document")  # past the last line
    rewrite = srv.call("workspace/executeCommand", {"command": "dg.rewriteSelection", "arguments": [
        {"textDocument": {"uri": "file:///a.txt"}, "range": {"start": pos(1, 2), "end": pos(0, 1)}}]})
    assert_invalid_params(rewrite, "before")
    assert fill(srv, pos(0, 10_000))["result"]["applied"] is True  # past a line's end is the line's end (LSP)


@pytest.mark.parametrize("method", ["textDocument/inlineCompletion", "textDocument/completion"])
def test_positions_out_of_range_in_requests(srv, method):
    for bad in (pos(BIG, 0), pos(0, -3)):
        assert_invalid_params(srv.call(method, {"textDocument": {"uri": "file:///a.txt"}, "position": bad,
                                                "context": {"triggerKind": 1}}))
    assert_invalid_params(srv.call(method, {"textDocument": {"uri": "file:///a.txt"}, "position": pos(9, 0),
                                            "context": {"triggerKind": 1}}), "outside the document")


def test_a_document_with_lone_surrogates_is_served(srv):
    """JSON lets a client send "\\ud800"; the server holds U+FFFD instead (the same length in every encoding), so
    fills work and positions after it still land where the client means."""
    uri = "file:///surrogate.txt"
    srv.open(uri, "x = '\ud800' + 'a'\ny = \n")
    reply = srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": {"uri": uri}, "position": pos(0, 7)}]})
    assert reply["result"]["applied"] is True, reply
    (doc_edit,) = srv.applied[-1]["edit"]["documentChanges"]
    assert doc_edit["edits"][0]["range"]["start"] == pos(0, 7)  # after the closing quote, as the client counts
    srv.send(srv.change(uri, (1, 4), (1, 4), "'\udfff'"))
    inline = srv.call("textDocument/inlineCompletion", {"textDocument": {"uri": uri}, "position": pos(1, 7),
                                                        "context": {"triggerKind": 1}})
    assert "error" not in inline and inline["result"]["items"][0]["range"]["start"] == pos(1, 7)


def test_lone_surrogates_are_replaced_in_the_store():
    doc = Document("file:///s.py", "python", 1, "a = '\ud800'\n")
    assert doc.text == "a = '\ufffd'\n"
    doc.apply_changes([{"range": {"start": pos(0, 5), "end": pos(0, 6)}, "text": "\udc00\udc01"}], 2)
    assert doc.text == "a = '\ufffd\ufffd'\n"
