"""Two real `dg-lsp` processes with `backend: "service"` sharing one auto-started engine service, through LSP:
one model load, inline items for both, a cancel from one leaves the other's fill alone, and the service killed
under them shows dg/status error, answers empty, and comes back."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal

import httpx
import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from service_harness import child_env

from dg_lsp.backends.autostart import socket_path
from tests.lsp.server_harness import start_server
from tests.lsp.server_harness import wait_for as until

TEXT = "alpha beta gamma\ndelta epsilon\n\nzeta eta theta\n"
# minConfidence 0: the shipped model's gate (0.90) would withhold the fills this test checks arrive
INIT = {"backend": "service", "debounceMs": 0, "drafts": True, "minConfidence": 0}
_ids = itertools.count(1)


async def start() -> LanguageClient:
    return await start_server(None, INIT, wait_ready=False, env=child_env())


def open_doc(client: LanguageClient, uri: str) -> None:
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        text_document=T.TextDocumentItem(uri=uri, language_id="plaintext", version=1, text=TEXT)))


def inline(client: LanguageClient, uri: str, line: int = 1, char: int = 13) -> tuple[str, asyncio.Future]:
    rid = f"t-{next(_ids)}"
    params = T.InlineCompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=line, character=char),
        context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Invoked))
    return rid, asyncio.ensure_future(client.protocol.send_request_async(T.TEXT_DOCUMENT_INLINE_COMPLETION, params,
                                                                         rid))


def state(client: LanguageClient) -> str | None:
    return client.statuses[-1]["state"] if client.statuses else None


def health() -> dict:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path(None, "auto", "auto"))), timeout=5) as h:
        return h.get("http://x/health").json()


def request_status(client: LanguageClient, rid: str) -> dict | None:
    found = [s["request"] for s in client.statuses if s.get("request") and s["request"]["id"] == rid]
    return found[-1] if found else None


async def test_two_servers_share_one_service_through_lsp():
    a, b = await asyncio.gather(start(), start())
    try:
        await until(lambda: state(a) == "ready" and state(b) == "ready", 120, "both servers ready")
        assert health()["model_loads"] == 1
        assert "engine service" in a.statuses[-1]["model"]
        open_doc(a, "file:///a.txt")
        open_doc(b, "file:///b.txt")
        _, fa = inline(a, "file:///a.txt")
        _, fb = inline(b, "file:///b.txt")
        items_a, items_b = await asyncio.wait_for(asyncio.gather(fa, fb), 60)
        assert items_a.items and items_b.items
        assert items_a.items[0].insert_text == items_b.items[0].insert_text  # same text, same model, same seed

        # a long fill on A, cancelled at its first draft, while B asks: B's answer is the one it got before
        a.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"dg": {"steps": 200}}))
        rid_a, long_a = inline(a, "file:///a.txt", 3, 4)
        await until(lambda: any(d["requestId"] == rid_a for d in a.drafts), 30, "A's first draft")
        rid_b, other_b = inline(b, "file:///b.txt", 3, 4)  # a new place: the engine runs, no cache answers
        a.protocol.notify(T.CANCEL_REQUEST, T.CancelParams(id=rid_a))
        with pytest.raises(Exception):  # noqa: B017 -- the cancelled request's error response
            await asyncio.wait_for(long_a, 30)
        assert (await asyncio.wait_for(other_b, 60)).items
        await until(lambda: request_status(a, rid_a) and request_status(b, rid_b), 10, "the request statuses")
        assert request_status(a, rid_a)["cancelled"] is True
        done_b = request_status(b, rid_b)
        assert done_b["cancelled"] is False and done_b["cached"] is False and done_b["steps"] > 0

        # the service killed under both: error, empty answers, then back (autoStart) with one model load
        a.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"dg": {"steps": None}}))
        seen = len(a.statuses)
        os.kill(health()["pid"], signal.SIGKILL)
        await until(lambda: state(a) == "error" and state(b) == "error", 10, "dg/status error on both")
        # A's watcher finds the service gone ("not answering; restarting it"), or B's watcher restarted it first and
        # A finds it loading ("restarting: loading its model"): dg/status carries the first error either way
        errors = [s["message"] for s in a.statuses[seen:] if s.get("state") == "error"]
        assert "not answering" in errors[0] or "restarting" in errors[0], errors
        await until(lambda: state(a) == "ready" and state(b) == "ready", 120, "both servers ready again")
        assert not [s["message"] for s in a.statuses[seen:] if "None" in (s.get("message") or "")]
        assert health()["model_loads"] == 1
        _, fa = inline(a, "file:///a.txt")
        assert (await asyncio.wait_for(fa, 60)).items[0].insert_text == items_a.items[0].insert_text
    finally:
        for c in (a, b):
            await c.shutdown_session()
            await c.stop()


def test_a_service_not_ready_is_named_without_none():
    from dg_lsp.backends.service import Endpoint, _not_ready

    at = Endpoint.parse("unix:/tmp/dg.sock")
    assert _not_ready(at, {"state": "loading", "error": None}).endswith("is restarting: loading its model")
    assert _not_ready(at, {"state": "failed", "error": "out of memory"}).endswith("is failed: out of memory")
    assert "None" not in _not_ready(at, {"state": "failed", "error": None})
    assert "None" not in _not_ready(at, {})
