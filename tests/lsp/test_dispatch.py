"""dg_lsp.wire.dispatch in process: the lifecycle's gate, arrival order, answers written once, errors without internals,
cancels, our requests' responses, and the initialize answer pygls gave for the same features."""

from __future__ import annotations

import asyncio
import json

from lsprotocol import types as T

from dg_lsp.server import build_server
from dg_lsp.wire.dispatch import KINDS, Route

CHANGE = {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
    "textDocument": {"uri": "file:///a.py", "version": 2},
    "contentChanges": [{"range": {"start": {"line": 0, "character": 1}, "end": {"line": 0, "character": 1}},
                        "text": "y"}]}}


class Captured:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


def answers(out: Captured) -> list[dict]:
    return [json.loads(body) for body in out.data.split(b"\r\n\r\n")[1:] for body in [body.split(b"Content-Length")[0]]]


def initialize(server, capabilities: dict | None = None) -> dict:
    server.dispatcher.receive({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                               "params": {"processId": None, "rootUri": None, "capabilities": capabilities or {}}})
    return answers(server.client.writer)[-1]


def started(capabilities: dict | None = None):
    server = build_server(engine_factory=lambda s: None, check=None)
    server.client.set_writer(Captured())
    initialize(server, capabilities)
    return server


async def closed(server) -> None:
    server.session.store.close("file:///a.py")  # the background reparse ends with its document
    while server.session._reparses:  # noqa: SLF001
        await asyncio.sleep(0.001)


async def test_did_change_reaches_the_store_and_sets_the_arrival():
    """(Async: the handler schedules the background reparse on the running loop.)"""
    server = started()
    server.session.store.open("file:///a.py", "python", 1, "x = 1\n")
    server.dispatcher.clock.arrived_at = 123.0
    server.dispatcher.receive(CHANGE)
    doc = server.session.store.get("file:///a.py")
    assert doc.text == "xy = 1\n" and doc.version == 2
    assert server.dispatcher.clock.received_at == 123.0 and server.dispatcher.clock.arrived_at is None
    assert server.session._change_at["file:///a.py"][0] == 123.0  # noqa: SLF001
    await closed(server)


async def test_a_failing_did_change_handler_is_reported_and_the_next_message_served():
    server = started()

    def broken(params: T.DidChangeTextDocumentParams) -> None:
        raise RuntimeError("boom")

    route = server.dispatcher.routes[T.TEXT_DOCUMENT_DID_CHANGE]
    server.dispatcher.routes[T.TEXT_DOCUMENT_DID_CHANGE] = Route(broken)
    server.dispatcher.receive(CHANGE)
    shown = [m for m in answers(server.client.writer) if m.get("method") == "window/showMessage"]
    assert len(shown) == 1 and "RuntimeError" in shown[0]["params"]["message"]
    assert "boom" not in shown[0]["params"]["message"]
    server.dispatcher.routes[T.TEXT_DOCUMENT_DID_CHANGE] = route
    server.session.store.open("file:///a.py", "python", 1, "x = 1\n")
    server.dispatcher.receive(CHANGE)
    assert server.session.store.get("file:///a.py").text == "xy = 1\n"
    await closed(server)


async def test_a_handler_exception_is_answered_without_its_text_traceback_or_paths():
    server = started()

    def explode(params) -> None:
        open("/srv/secret/model/config.json")  # FileNotFoundError naming a server path

    server.dispatcher.request("dg/explode", explode)
    server.dispatcher.receive({"jsonrpc": "2.0", "id": 2, "method": "dg/explode"})
    answer = answers(server.client.writer)[-1]
    assert answer["id"] == 2 and answer["error"]["code"] == -32603 and "data" not in answer["error"]
    assert "FileNotFoundError" in answer["error"]["message"] and "/srv" not in answer["error"]["message"]


async def test_a_response_that_does_not_fit_fails_our_request_instead_of_leaving_it_waiting():
    server = build_server(engine_factory=lambda s: None)
    server.client.set_writer(Captured())
    pending = server.client.request(T.WORKSPACE_APPLY_EDIT, T.ApplyWorkspaceEditParams(
        edit=T.WorkspaceEdit(changes={})), msg_id="ours-1")
    server.dispatcher.receive({"jsonrpc": "2.0", "id": "ours-1", "result": {"failedChange": 0}})
    assert pending.done() and "malformed response" in str(pending.exception())


async def test_a_response_is_structured_and_an_error_response_fails_the_request():
    server = build_server(engine_factory=lambda s: None)
    server.client.set_writer(Captured())
    edit = T.ApplyWorkspaceEditParams(edit=T.WorkspaceEdit(changes={}))
    ok, refused = (server.client.request(T.WORKSPACE_APPLY_EDIT, edit) for _ in range(2))
    sent = [m["id"] for m in answers(server.client.writer)]
    server.dispatcher.receive({"jsonrpc": "2.0", "id": sent[0], "result": {"applied": True}})
    server.dispatcher.receive({"jsonrpc": "2.0", "id": sent[1], "error": {"code": -32000, "message": "no"}})
    assert ok.result() == T.ApplyWorkspaceEditResult(applied=True)
    assert "no" in str(refused.exception()) and refused.exception().code == -32000


def inline_request(msg_id: int, line: int = 0, character: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/inlineCompletion", "params": {
        "textDocument": {"uri": "file:///a.py"}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}}}


async def test_answered_requests_leave_nothing_behind():
    """pygls filed the task of every generator handler under a fresh uuid and never removed it: a session kept one
    finished task per keystroke. Each request here is answered (empty: no model) and nothing stays."""
    server = started()
    server.session.store.open("file:///a.py", "python", 1, "x = 1\n")
    for i in range(1, 21):
        server.dispatcher.receive(dict(CHANGE, params=dict(CHANGE["params"], textDocument={
            "uri": "file:///a.py", "version": i + 1})))
        server.dispatcher.receive(inline_request(i))
        for _ in range(5):
            await asyncio.sleep(0)
    answered = {a["id"]: a for a in answers(server.client.writer) if "id" in a}
    assert all(answered[i].get("result") is None and "error" not in answered[i] for i in range(1, 21))
    assert server.dispatcher._open == {}  # noqa: SLF001
    await closed(server)


async def test_a_position_outside_the_document_is_still_invalid_params():
    server = started()
    server.session.store.open("file:///a.py", "python", 1, "x = 1\n")
    server.dispatcher.receive(inline_request(1, line=9))
    server.dispatcher.receive(inline_request(2, character=-1))  # not a uinteger: the converter refuses it
    server.dispatcher.receive(dict(inline_request(3), params={**inline_request(3)["params"],
                                                              "position": {"line": "0", "character": 1}}))
    for _ in range(5):
        await asyncio.sleep(0)
    answered = {a["id"]: a for a in answers(server.client.writer) if "id" in a}
    assert answered[1]["error"]["code"] == -32602 and "outside the document" in answered[1]["error"]["message"]
    assert answered[2]["error"]["code"] == -32602
    assert answered[3]["error"]["code"] == -32602 and "must be integers" in answered[3]["error"]["message"]
    await closed(server)


async def test_a_cancelled_request_is_answered_once_and_its_task_stopped():
    server = started()
    gate = asyncio.Event()
    ran = []

    async def slow(arrived, params) -> dict:
        ran.append(arrived)
        await gate.wait()
        return {"late": True}

    server.dispatcher.request("dg/slow", slow, arrive=lambda request_id, params: request_id)
    server.dispatcher.receive({"jsonrpc": "2.0", "id": 7, "method": "dg/slow"})
    server.dispatcher.receive({"jsonrpc": "2.0", "id": 8, "method": "dg/slow"})
    await asyncio.sleep(0)
    server.dispatcher.receive({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}})
    server.dispatcher.receive({"jsonrpc": "2.0", "id": 9, "method": "shutdown"})  # cancels 8
    gate.set()
    for _ in range(5):
        await asyncio.sleep(0)
    by_id = [(a["id"], a.get("error", {}).get("code")) for a in answers(server.client.writer) if a.get("id") != 0]
    assert sorted(by_id, key=str) == [(7, -32800), (8, -32800), (9, None)]
    assert ran == ["7", "8"] and server.dispatcher._open == {}  # noqa: SLF001
    server.dispatcher.receive({"jsonrpc": "2.0", "method": "exit"})
    assert server.dispatcher.exit_code == 0


def test_the_lifecycle_gate():
    server = build_server(engine_factory=lambda s: None, check=None)
    server.client.set_writer(Captured())
    d = server.dispatcher
    d.receive({"jsonrpc": "2.0", "id": 1, "method": "textDocument/completion", "params": {}})
    initialize(server)
    d.receive({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"capabilities": {}}})
    d.receive({"jsonrpc": "2.0", "id": 3, "method": "initialized", "params": {}})  # a notification with an id
    d.receive({"jsonrpc": "2.0", "id": 4, "method": "no/such/method"})
    d.receive({"jsonrpc": "2.0", "method": "dg/documentState", "params": {}})  # a request of ours without an id
    d.receive({"jsonrpc": "2.0", "id": 5, "method": "shutdown"})
    d.receive({"jsonrpc": "2.0", "id": 6, "method": "textDocument/completion", "params": {}})
    codes = {a["id"]: a.get("error", {}).get("code") for a in answers(server.client.writer)}
    assert codes == {1: -32002, 0: None, 2: -32600, 3: -32600, 4: -32601, 5: None, 6: -32600}
    assert not [m for m in answers(server.client.writer) if "method" in m]  # dropped, not run (nor reported)
    d.receive({"jsonrpc": "2.0", "method": "exit"})
    assert d.exit_code == 0
    again = build_server(engine_factory=lambda s: None, check=None)
    again.client.set_writer(Captured())
    again.dispatcher.receive({"jsonrpc": "2.0", "method": "exit"})
    assert again.dispatcher.exit_code == 1  # exit without shutdown


def test_methods_are_requests_or_notifications_as_lsp_says():
    assert KINDS[T.TEXT_DOCUMENT_DID_CHANGE] == KINDS[T.EXIT] == KINDS[T.CANCEL_REQUEST] == "notification"
    assert KINDS[T.INITIALIZE] == KINDS[T.SHUTDOWN] == KINDS[T.TEXT_DOCUMENT_INLINE_COMPLETION] == "request"


def test_our_notifications_are_written_as_pygls_wrote_them():
    from pygls.lsp.server import LanguageServer

    server = build_server(engine_factory=lambda s: None)
    theirs = LanguageServer("x", "1")
    body = {"uri": "file:///a.py", "range": T.Range(T.Position(1, 2), T.Position(1, 4)), "text": "é", "x": None}
    for method, params in (("dg/draft", body), (T.WINDOW_SHOW_MESSAGE, T.ShowMessageParams(
            type=T.MessageType.Info, message="m")), (T.PROGRESS, T.ProgressParams(
            token="t", value=T.WorkDoneProgressBegin(title="b", cancellable=True)))):
        ours, written = Captured(), Captured()
        server.client.set_writer(ours)
        server.client.notify(method, params)
        theirs.protocol.set_writer(written)
        theirs.protocol.notify(method, params)
        assert answers(ours) == answers(written)


# The initialize answer pygls' capability builder gave for these features (captured from the server before the
# dispatch was ours): client capabilities -> the server's.
BEFORE = {
    "codeActionProvider": {"codeActionKinds": ["quickfix", "refactor.rewrite"]}, "completionProvider": {},
    "executeCommandProvider": {"commands": ["dg.fillHole", "dg.rewriteSelection", "dg.acceptNextEdit"]},
    "experimental": {"dgNextEdit": True}, "inlineCompletionProvider": {}, "positionEncoding": "utf-16",
    "textDocumentSync": {"change": 2, "openClose": True, "save": True},
    "workspace": {"fileOperations": {}, "workspaceFolders": {"changeNotifications": True, "supported": True}}}
FULL = {"window": {"workDoneProgress": True}, "workspace": {"workspaceFolders": True, "applyEdit": True},
        "textDocument": {"synchronization": {"willSave": True, "willSaveWaitUntil": True, "didSave": True},
                         "inlineCompletion": {}, "completion": {}, "codeAction": {}}}


def test_the_initialize_answer_is_the_one_pygls_built():
    for client, changed in (({}, {}), ({"general": {"positionEncodings": ["latin1"]}}, {}),
                            ({"general": {"positionEncodings": ["utf-8", "utf-16"]}}, {"positionEncoding": "utf-8"}),
                            ({"general": {"positionEncodings": ["utf-32"]}}, {"positionEncoding": "utf-32"}),
                            (FULL, {"textDocumentSync": {**BEFORE["textDocumentSync"], "willSave": False,
                                                         "willSaveWaitUntil": False}})):
        server = build_server(engine_factory=lambda s: None, check=None)
        server.client.set_writer(Captured())
        result = initialize(server, client)["result"]
        assert result["capabilities"] == {**BEFORE, **changed}, client
        assert result["serverInfo"]["name"] == "dg-lsp"
        assert server.session.encoding == result["capabilities"]["positionEncoding"]


PROGRESS_CANCEL = {"jsonrpc": "2.0", "method": "window/workDoneProgress/cancel", "params": {"token": "tok"}}


def test_a_progress_cancel_reaches_its_command_until_the_progress_ends():
    server = started()
    stopped = []
    server.client.progress("tok", T.WorkDoneProgressBegin(title="t", cancellable=True))
    server.client.on_progress_cancel("tok", lambda: stopped.append("tok"))
    server.dispatcher.receive(PROGRESS_CANCEL)
    assert stopped == ["tok"]
    server.client.on_progress_cancel("tok", lambda: stopped.append("late"))
    server.client.progress("tok", T.WorkDoneProgressEnd())
    server.dispatcher.receive(PROGRESS_CANCEL)
    assert stopped == ["tok"]  # ended: nothing left to cancel
