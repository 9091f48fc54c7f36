"""Bad input over stdio: unknown URIs, positions past the end, a 10 MB file, binary garbage, unknown commands and
methods, bad arguments, invalid settings. Each gets a clear error or an empty result, and the server then still
serves the next request."""

from __future__ import annotations

import itertools
import random

import pytest
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException
from server_harness import edit_doc, inline_params, open_doc, wait_for

TEXT = "alpha beta gamma\ndelta epsilon\n\nzeta eta theta\n"
_n = itertools.count(1)


@pytest.fixture
def server_settings() -> dict:
    return {"steps": 4, "debounceMs": 0}


def fill_args(uri: str, line: int, char: int) -> list:
    return [{"textDocument": {"uri": uri}, "position": {"line": line, "character": char}}]


async def still_serving(client) -> None:
    uri = f"file:///healthy-{next(_n)}.txt"
    open_doc(client, uri, TEXT, "plaintext")
    res = await client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="dg.fillHole", arguments=fill_args(uri, 0, 5)))
    assert res["applied"] is True, res


async def test_unknown_uri(client):
    uri = "file:///never-opened.py"
    assert await client.text_document_inline_completion_async(inline_params(uri, 0, 0)) is None
    assert await client.text_document_completion_async(
        T.CompletionParams(text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(0, 0))) is None
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), range=T.Range(T.Position(0, 0), T.Position(0, 0)),
        context=T.CodeActionContext(diagnostics=[])))
    assert not actions
    res = await client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="dg.fillHole", arguments=fill_args(uri, 0, 0)))
    assert res["applied"] is False and "unknown document" in res["reason"]
    client.text_document_did_change(T.DidChangeTextDocumentParams(  # ignored, logged
        text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[T.TextDocumentContentChangeWholeDocument(text="x")]))
    await still_serving(client)


async def test_position_past_the_end(client):
    uri = "file:///short.txt"
    open_doc(client, uri, TEXT, "plaintext")
    with pytest.raises(JsonRpcException, match="outside the document"):
        await client.text_document_inline_completion_async(inline_params(uri, 99, 0))
    with pytest.raises(JsonRpcException, match="outside the document"):
        await client.workspace_execute_command_async(
            T.ExecuteCommandParams(command="dg.fillHole", arguments=fill_args(uri, 99, 0)))
    with pytest.raises(JsonRpcException, match="outside the document"):
        await client.workspace_execute_command_async(T.ExecuteCommandParams(
            command="dg.rewriteSelection", arguments=[{"textDocument": {"uri": uri}, "range": {
                "start": {"line": 0, "character": 0}, "end": {"line": 50, "character": 0}}}]))
    # A character past a line's end means the line's end (LSP): answered normally.
    res = await client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="dg.fillHole", arguments=fill_args(uri, 0, 500)))
    assert res["applied"] is True
    await still_serving(client)


async def test_ten_megabyte_file(client):
    uri = "file:///huge.py"
    line = "value_{0} = compute(value_{0}, 'x' * 10)  # padding to make the line longer\n"
    text = "".join(line.format(i) for i in range(10_000_000 // len(line.format(0))))
    assert len(text) >= 9_900_000
    open_doc(client, uri, text, "python")
    last = text.count("\n")
    res = await client.text_document_inline_completion_async(inline_params(uri, last // 2, 4))
    assert res is None or len(res.items) == 1
    edit_doc(client, uri, last // 2, 0, "# typed\n")
    res = await client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="dg.fillHole", arguments=fill_args(uri, last, 0)))
    assert set(res) == {"applied", "reason", "latencyMs"}
    client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri=uri)))
    await still_serving(client)


async def test_binary_garbage_text(client):
    rng = random.Random(0)
    chars = [chr(rng.randrange(0, 0x110000)) for _ in range(20_000)]
    chars = [c if not 0xD800 <= ord(c) < 0xE000 else "\ufffd" for c in chars]  # JSON strings are Unicode
    text = "".join(chars) + "\x00\x01\x02\r\r\n\x7f"
    for lang in ("python", "plaintext"):
        uri = f"file:///garbage-{lang}"
        open_doc(client, uri, text, lang)
        res = await client.text_document_inline_completion_async(inline_params(uri, 2, 1))  # "\r" breaks lines
        assert res is None or len(res.items) == 1
        res = await client.workspace_execute_command_async(
            T.ExecuteCommandParams(command="dg.fillHole", arguments=fill_args(uri, 0, 100)))
        assert set(res) == {"applied", "reason", "latencyMs"}
    await still_serving(client)


async def test_unknown_command_and_bad_arguments(client):
    with pytest.raises(JsonRpcException, match="unknown command 'dg.nope'"):
        await client.workspace_execute_command_async(T.ExecuteCommandParams(command="dg.nope", arguments=[]))
    bad = [None, [], [1], [{"position": {"line": 0, "character": 0}}],
           [{"textDocument": {"uri": "file:///x"}, "position": {"line": -1, "character": 0}}],
           [{"textDocument": {"uri": "file:///x"}, "position": {"line": 0}}], [{}, {}]]
    for args in bad:
        with pytest.raises(JsonRpcException, match="dg.fillHole"):
            await client.workspace_execute_command_async(T.ExecuteCommandParams(command="dg.fillHole",
                                                                                arguments=args))
    with pytest.raises(JsonRpcException, match="widen"):
        await client.workspace_execute_command_async(T.ExecuteCommandParams(command="dg.rewriteSelection", arguments=[
            {"textDocument": {"uri": "file:///x"}, "widen": "yes",
             "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}}]))
    await still_serving(client)


async def test_unknown_method(client):
    with pytest.raises(JsonRpcException, match="dg/nope"):
        await client.protocol.send_request_async("dg/nope", {"x": 1})
    client.protocol.notify("dg/nopeNotification", {"x": 1})  # ignored
    await still_serving(client)


async def test_invalid_settings_warn_and_fall_back(client):
    before = len(client.messages)
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"settings": {"dg": {"steps": -3, "debounceMs": "fast", "colour": "blue"}}}))
    await wait_for(lambda: len(client.messages) >= before + 3)
    new = [m.message for m in client.messages[before:]]
    assert all(m.type == T.MessageType.Warning for m in client.messages[before:])
    assert any("steps" in m for m in new) and any("debounceMs" in m for m in new) and any("colour" in m for m in new)
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings=["not", "an", "object"]))
    await wait_for(lambda: len(client.messages) >= before + 4)
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"steps": 4}))
    await still_serving(client)


async def test_bad_model_path_reports_an_error_then_recovers(client, tiny_ckpt):
    before = len(client.messages)
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"modelPath": str(tiny_ckpt.parent / "no-such-model")}))
    await wait_for(lambda: client.statuses[-1]["state"] == "error", timeout=60)
    errors = [m for m in client.messages[before:] if m.type == T.MessageType.Error]
    assert errors and "no-such-model" in errors[0].message
    uri = "file:///while-broken.txt"
    open_doc(client, uri, TEXT, "plaintext")
    res = await client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="dg.fillHole", arguments=fill_args(uri, 0, 5)))
    assert res["applied"] is False and "not ready" in res["reason"]
    assert await client.text_document_inline_completion_async(inline_params(uri, 0, 5)) is None
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"modelPath": None}))
    await wait_for(lambda: client.statuses[-1]["state"] == "ready", timeout=60)
    await still_serving(client)
