"""Cancellation and staleness end to end: $/cancelRequest or a keystroke stops the engine within one denoising
step, and a result computed for an older document version is neither returned nor applied."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from lsprotocol import types as T
from server_harness import edit_doc, open_doc, requests_done, wait_for

STEPS = 200  # long enough (~1 s on the tiny model) that every cancel lands mid-run
TEXT = "alpha beta gamma\ndelta epsilon\n\nzeta eta theta\n"
_ids = itertools.count(1)


@pytest.fixture
def server_settings() -> dict:
    return {"drafts": True, "steps": STEPS, "debounceMs": 0}


def fill_request(client, uri: str, line: int = 1, char: int = 13) -> tuple[str, asyncio.Future]:
    rid = f"test-{next(_ids)}"
    params = T.ExecuteCommandParams(command="dg.fillHole", arguments=[
        {"textDocument": {"uri": uri}, "position": {"line": line, "character": char}}])
    fut = asyncio.ensure_future(client.protocol.send_request_async(T.WORKSPACE_EXECUTE_COMMAND, params, rid))
    return rid, fut


def inline_request(client, uri: str, line: int = 1, char: int = 13) -> tuple[str, asyncio.Future]:
    rid = f"test-{next(_ids)}"
    params = T.InlineCompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line, char),
        context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Automatic))
    fut = asyncio.ensure_future(client.protocol.send_request_async(T.TEXT_DOCUMENT_INLINE_COMPLETION, params, rid))
    return rid, fut


async def first_draft(client, rid: str) -> None:
    await wait_for(lambda: any(d["requestId"] == rid for d in client.drafts), what=f"a dg/draft for {rid}")


async def outcome(fut: asyncio.Future):
    """The response, or the exception the client raised for an error response."""
    try:
        return await asyncio.wait_for(fut, 20)
    except Exception as exc:  # RequestCancelled arrives as a JsonRpcException
        return exc


async def final_stats(client, rid: str) -> dict:
    stats = await wait_for(lambda: requests_done(client, rid), what=f"dg/status for {rid}")
    return stats[-1]


@pytest.mark.parametrize("kind", ["command", "inline"])
async def test_cancel_request_stops_the_engine_within_one_step(client, kind):
    uri = f"file:///cancel-{kind}.txt"
    open_doc(client, uri, TEXT, "plaintext")
    rid, fut = (fill_request if kind == "command" else inline_request)(client, uri)
    await first_draft(client, rid)
    client.protocol.notify(T.CANCEL_REQUEST, T.CancelParams(id=rid))
    res = await outcome(fut)
    assert isinstance(res, Exception) or res is None or res["applied"] is False, res
    stats = await final_stats(client, rid)
    assert stats["cancelled"] is True and stats["stepsAfterCancel"] is not None
    assert stats["stepsAfterCancel"] <= 1, stats
    assert stats["steps"] < STEPS
    drafts = [d for d in client.drafts if d["requestId"] == rid]
    assert len(drafts) <= stats["steps"] and not any(d["done"] for d in drafts)
    assert not [e for e in client.applied_edits if e.edit.document_changes[0].text_document.uri == uri]
    await assert_still_serving(client)


@pytest.mark.parametrize("kind", ["command", "inline"])
async def test_keystroke_during_a_fill_drops_the_stale_result(client, kind):
    uri = f"file:///stale-{kind}.txt"
    open_doc(client, uri, TEXT, "plaintext")
    rid, fut = (fill_request if kind == "command" else inline_request)(client, uri)
    await first_draft(client, rid)
    edit_doc(client, uri, 0, 0, "#")  # the user typed while the fill was computed
    res = await outcome(fut)
    if kind == "command":
        assert res["applied"] is False and res["reason"] == "document changed", res
    else:
        assert res is None or res.items == [], res
    stats = await final_stats(client, rid)
    assert stats["reason"] == "document changed" and stats["stepsAfterCancel"] <= 1, stats
    assert not [e for e in client.applied_edits if e.edit.document_changes[0].text_document.uri == uri]


async def test_newer_inline_request_supersedes_the_running_one(client):
    uri = "file:///supersede.txt"
    open_doc(client, uri, TEXT, "plaintext")
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"steps": 8}))
    rid1, fut1 = inline_request(client, uri)
    await first_draft(client, rid1)
    rid2, fut2 = inline_request(client, uri, 0, 5)
    assert await outcome(fut1) is None  # the older one answers empty, the newer one answers
    res2 = await outcome(fut2)
    assert res2 is not None and len(res2.items) == 1
    stats1 = await final_stats(client, rid1)
    assert stats1["cancelled"] and stats1["stepsAfterCancel"] <= 1
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"steps": STEPS}))


async def test_debounce_latest_wins(client):
    uri = "file:///debounce.txt"
    open_doc(client, uri, TEXT, "plaintext")
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"debounceMs": 150, "steps": 4}))
    reqs = [inline_request(client, uri, 1, c) for c in (2, 6, 13)]
    results = [await outcome(f) for _, f in reqs]
    assert results[0] is None and results[1] is None and results[2] is not None
    assert not requests_done(client, reqs[0][0]) and not requests_done(client, reqs[1][0])  # no engine call
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"debounceMs": 0, "steps": STEPS}))


async def assert_still_serving(client) -> None:
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"steps": 4}))
    uri = f"file:///after-{next(_ids)}.txt"
    open_doc(client, uri, TEXT, "plaintext")
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="dg.fillHole", arguments=[{"textDocument": {"uri": uri}, "position": {"line": 0, "character": 5}}]))
    assert res["applied"] is True, res
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"steps": STEPS}))
