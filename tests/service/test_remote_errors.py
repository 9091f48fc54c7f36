"""A remote backend's failure is an error with its reason, never a cancel: at the seam (the `openai` backend against
a stand-in answering 400 with an error body, 500 with a plain body, an error event mid-stream, a dropped
connection, nothing listening; the `service` backend against a real engine service refusing a prompt), and through
a real `dg-lsp` process: dg/status carries `reason: "error"` with the message, a command answers `applied: false`
with it, shows it, and edits nothing."""

from __future__ import annotations

import asyncio
import shutil
import signal

import pytest
from fake_vllm import FakeVLLM
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from service_harness import child_env, private_dir, start_service

from dg_lsp.config import Settings
from dg_lsp.devtools.client import as_dict
from tests.lsp.server_harness import start_server
from tests.lsp.server_harness import wait_for as until

PREFIX, SUFFIX = "def area(width, height):\n    ", "\n\n\nprint(area(2, 3))\n"


@pytest.fixture
def vllm():
    with FakeVLLM() as fake:
        yield fake


def context(backend) -> list[int]:
    return backend.prompt_format.context(backend.encode(PREFIX), backend.encode(SUFFIX))


@pytest.mark.parametrize(("mode", "says"), [("error-body", "HTTP 400: This model's maximum context length"),
                                            ("500", "HTTP 500: Internal Server Error"),
                                            ("error-event", "engine dead"),
                                            ("drop", "is not answering")])
def test_the_openai_backend_reports_each_failure_as_an_error(vllm, connect, mode, says):
    b = connect(Settings(backend="openai", endpoint=vllm.url))
    vllm.mode = mode
    res = b.infill(context(b), canvas_length=16)
    assert res.text == "" and not res.cancelled and says in res.error


def test_nothing_listening_is_an_error_too(connect):
    with FakeVLLM() as gone:
        b = connect(Settings(backend="openai", endpoint=gone.url))
    res = b.infill(context(b), canvas_length=16)  # the server went away after the connect
    assert res.text == "" and not res.cancelled and "is not answering (ConnectError" in res.error
    again = b.infill(context(b), canvas_length=16)  # now not ready: fails at once with the same reason
    assert not again.cancelled and again.error == b.status.message


def test_the_service_backend_reports_a_refused_prompt_as_an_error(connect):
    d = private_dir()
    svc = start_service(d, "--max-prompt-tokens", "8")
    try:
        b = connect(Settings(backend="service", endpoint=svc.endpoint, auto_start=False))
        res = b.infill(context(b), canvas_length=16)
        assert res.text == "" and not res.cancelled and "HTTP 413" in res.error
        assert b.status.ready  # one refused request does not make the service unusable
    finally:
        svc.kill(signal.SIGTERM)
        shutil.rmtree(d, ignore_errors=True)


# -- through a real dg-lsp process --------------------------------------------------------------------------------

URI, TEXT = "file:///geometry.py", PREFIX + SUFFIX


def request_status(client: LanguageClient, rid: str) -> dict | None:
    found = [s for s in client.statuses if s.get("request") and as_dict(s["request"])["id"] == rid]
    return found[-1] if found else None


async def test_a_remote_error_reaches_dg_status_and_the_command_as_an_error(vllm):
    client = await start_server(None, {"backend": "openai", "endpoint": vllm.url, "debounceMs": 0}, wait_ready=False,
                                env=child_env())
    try:
        await until(lambda: client.statuses and client.statuses[-1]["state"] == "ready", 120, "ready")
        client.text_document_did_open(T.DidOpenTextDocumentParams(
            text_document=T.TextDocumentItem(uri=URI, language_id="python", version=1, text=TEXT)))
        pos = T.Position(line=1, character=4)
        for n, (mode, says) in enumerate([("500", "HTTP 500"), ("error-body", "maximum context length")]):
            vllm.mode = mode
            rid = f"inline-{n}"
            params = T.InlineCompletionParams(
                text_document=T.TextDocumentIdentifier(uri=URI), position=pos,
                context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Invoked))
            answer = await asyncio.wait_for(
                client.protocol.send_request_async(T.TEXT_DOCUMENT_INLINE_COMPLETION, params, rid), 60)
            assert answer is None
            status = await until(lambda rid=rid: request_status(client, rid), 10, "the request's dg/status")
            request = as_dict(status["request"])
            assert request["reason"] == "error" and request["cancelled"] is False and says in request["error"]
            assert says in status["message"] and status["state"] == "ready"

        args = [{"textDocument": {"uri": URI, "version": 1}, "position": {"line": 1, "character": 4}}]
        result = await asyncio.wait_for(client.workspace_execute_command_async(
            T.ExecuteCommandParams(command="dg.fillHole", arguments=args)), 60)
        result = as_dict(result)
        assert result["applied"] is False and result["reason"].startswith("error: ")
        assert "maximum context length" in result["reason"]
        shown = lambda: any("maximum context length" in m.message for m in client.messages)  # noqa: E731
        await until(shown, 10, "the message shown")
        assert client.applied_edits == []

        vllm.mode = "ok"  # the server answers again: the same command edits
        result = as_dict(await asyncio.wait_for(client.workspace_execute_command_async(
            T.ExecuteCommandParams(command="dg.fillHole", arguments=args)), 60))
        assert result["applied"] is True and len(client.applied_edits) == 1
    finally:
        await client.shutdown_session()
        await client.stop()

