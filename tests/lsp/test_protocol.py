"""DgProtocol in process: a didChange goes straight to its handler, and a failing handler is reported (without its
internals), not raised."""

from __future__ import annotations

import asyncio
import json

from lsprotocol import types as T

from dg_lsp.server import build_server

CHANGE = {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
    "textDocument": {"uri": "file:///a.py", "version": 2},
    "contentChanges": [{"range": {"start": {"line": 0, "character": 1}, "end": {"line": 0, "character": 1}},
                        "text": "y"}]}}


def structured(server, message: dict):
    return json.loads(json.dumps(message), object_hook=server.protocol.structure_message)


async def test_did_change_reaches_the_store_and_sets_the_arrival():
    """(Async: the handler schedules the background reparse on the running loop.)"""
    server = build_server(engine_factory=lambda s: None)
    server.store.open("file:///a.py", "python", 1, "x = 1\n")
    server.protocol.arrived_at = 123.0
    server.protocol.handle_message(structured(server, CHANGE))
    doc = server.store.get("file:///a.py")
    assert doc.text == "xy = 1\n" and doc.version == 2
    assert server.protocol.received_at == 123.0 and server.protocol.arrived_at is None
    assert server._change_at["file:///a.py"][0] == 123.0
    server.store.close("file:///a.py")  # the background reparse ends with its document
    while server._reparses:
        await asyncio.sleep(0.001)


async def test_a_failing_did_change_handler_is_reported_and_the_next_message_served():
    server = build_server(engine_factory=lambda s: None)
    errors = []
    server._report_server_error = lambda error, source: errors.append((error, source))  # noqa: SLF001

    def broken(params: T.DidChangeTextDocumentParams) -> None:
        raise RuntimeError("boom")

    handler = server.protocol.fm.features[T.TEXT_DOCUMENT_DID_CHANGE]
    server.protocol.fm.features[T.TEXT_DOCUMENT_DID_CHANGE] = broken
    server.protocol.handle_message(structured(server, CHANGE))
    assert len(errors) == 1 and "RuntimeError" in str(errors[0][0]) and "boom" not in str(errors[0][0])
    server.protocol.fm.features[T.TEXT_DOCUMENT_DID_CHANGE] = handler
    server.store.open("file:///a.py", "python", 1, "x = 1\n")
    server.protocol.handle_message(structured(server, CHANGE))
    assert server.store.get("file:///a.py").text == "xy = 1\n"


class Captured:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


async def test_a_handler_exception_is_answered_without_its_text_traceback_or_paths():
    server = build_server(engine_factory=lambda s: None)
    out = Captured()
    server.protocol.set_writer(out)

    @server.feature("dg/explode")
    def explode(ls, params) -> None:
        open("/srv/secret/model/config.json")  # FileNotFoundError naming a server path

    server.protocol.receive({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    server.protocol.receive({"jsonrpc": "2.0", "id": 2, "method": "dg/explode"})
    answer = json.loads(out.data.rsplit(b"\r\n\r\n", 1)[1])
    assert answer["id"] == 2 and answer["error"]["code"] == -32603 and "data" not in answer["error"]
    assert "FileNotFoundError" in answer["error"]["message"] and "/srv" not in answer["error"]["message"]


async def test_a_response_that_does_not_fit_fails_our_request_instead_of_leaving_it_waiting():
    server = build_server(engine_factory=lambda s: None)
    server.protocol.set_writer(Captured())
    pending = server.protocol.send_request(T.WORKSPACE_APPLY_EDIT, T.ApplyWorkspaceEditParams(
        edit=T.WorkspaceEdit(changes={})), msg_id="ours-1")
    server.protocol.receive({"jsonrpc": "2.0", "id": "ours-1", "result": {"failedChange": 0}})
    assert pending.done() and "malformed response" in str(pending.exception())


def answers(out: Captured) -> list[dict]:
    return [json.loads(body) for body in out.data.split(b"\r\n\r\n")[1:] for body in [body.split(b"Content-Length")[0]]]


def inline_request(msg_id: int, line: int = 0, character: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/inlineCompletion", "params": {
        "textDocument": {"uri": "file:///a.py"}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}}}


async def test_answered_requests_leave_nothing_behind_in_the_protocol():
    """pygls filed the task of every generator handler under a fresh uuid and never removed it: a session kept one
    finished task per keystroke. Each request here is answered (empty: no model) and nothing stays."""
    server = build_server(engine_factory=lambda s: None, check=None)
    out = Captured()
    server.protocol.set_writer(out)
    server.protocol.receive({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                             "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    server.store.open("file:///a.py", "python", 1, "x = 1\n")
    for i in range(1, 21):
        server.protocol.receive(dict(CHANGE, params=dict(CHANGE["params"], textDocument={
            "uri": "file:///a.py", "version": i + 1})))
        server.protocol.receive(inline_request(i))
        for _ in range(5):
            await asyncio.sleep(0)
    answered = {a["id"]: a for a in answers(out) if "id" in a}
    assert all(answered[i].get("result") is None and "error" not in answered[i] for i in range(1, 21))
    assert server.protocol._request_futures == {}  # noqa: SLF001
    server.store.close("file:///a.py")
    while server._reparses:
        await asyncio.sleep(0.001)


async def test_a_position_outside_the_document_is_still_invalid_params():
    server = build_server(engine_factory=lambda s: None, check=None)
    out = Captured()
    server.protocol.set_writer(out)
    server.protocol.receive({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                             "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    server.store.open("file:///a.py", "python", 1, "x = 1\n")
    server.protocol.receive(inline_request(1, line=9))
    server.protocol.receive(inline_request(2, character=-1))  # not a uinteger: cattrs refuses it
    for _ in range(5):
        await asyncio.sleep(0)
    answered = {a["id"]: a for a in answers(out) if "id" in a}
    assert answered[1]["error"]["code"] == -32602 and "outside the document" in answered[1]["error"]["message"]
    assert answered[2]["error"]["code"] == -32602


def test_message_kinds_by_class_agree_with_pygls_isinstance_checks():
    import attrs
    from pygls.protocol.json_rpc import RPCNotification, RPCRequest, RPCResponse

    from dg_lsp.protocol import _MESSAGE_KINDS

    assert {T.InlineCompletionRequest, T.DidChangeTextDocumentNotification, T.ResponseErrorMessage} <= set(
        _MESSAGE_KINDS)
    for cls, kind in _MESSAGE_KINDS.items():
        message = object.__new__(cls)
        for f in attrs.fields(cls):
            object.__setattr__(message, f.name, None)
        pygls_kind = ("request" if isinstance(message, RPCRequest) else "notification"
                      if isinstance(message, RPCNotification) else "response" if isinstance(message, RPCResponse)
                      else "error")
        assert kind == pygls_kind, cls


def test_our_notifications_are_written_as_pygls_wrote_them():
    server = build_server(engine_factory=lambda s: None)
    ours, theirs = Captured(), Captured()
    body = {"uri": "file:///a.py", "range": T.Range(T.Position(1, 2), T.Position(1, 4)), "text": "é", "x": None}
    server.protocol.set_writer(ours)
    server.protocol.notify("dg/draft", body)
    server.protocol.set_writer(theirs)
    super(type(server.protocol), server.protocol).notify("dg/draft", body)
    assert answers(ours) == answers(theirs)
