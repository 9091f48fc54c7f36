"""End to end over stdio with the real engine on a tiny random checkpoint: capabilities, loading, the three
request kinds, codeAction -> executeCommand -> applyEdit, caches, incremental sync reaching the server.

One fresh server per test (no test sees another's documents, caches or settings). The checkpoint is random, so
fills are gibberish: tests check the protocol, never the text. Documents are "plaintext" where a test needs a
non-empty fill (no grammar: nothing is rejected for bad syntax).
"""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as T
from server_harness import edit_doc, open_doc, requests_done, wait_for

from dg_lsp.trace import STAGES

SETTINGS = {"drafts": True, "steps": 6, "debounceMs": 0}
TEXT = "alpha beta gamma\ndelta epsilon\n\nzeta eta theta\n"


@pytest.fixture
def server_settings() -> dict:
    return SETTINGS


def pos(line: int, char: int) -> T.Position:
    return T.Position(line=line, character=char)


async def test_capabilities_advertise_every_feature(client):
    caps = client.init_result.capabilities
    assert caps.inline_completion_provider  # registered with InlineCompletionOptions
    assert caps.completion_provider is not None
    assert caps.code_action_provider
    assert sorted(caps.execute_command_provider.commands) == ["dg.acceptNextEdit", "dg.fillHole", "dg.rewriteSelection"]
    assert caps.experimental == {"dgNextEdit": True}
    sync = caps.text_document_sync
    assert sync.change == T.TextDocumentSyncKind.Incremental and sync.open_close


async def test_model_loads_in_the_background_with_progress(client):
    states = [s["state"] for s in client.statuses]
    assert states.index("loading") < states.index("ready")
    ready = next(s for s in client.statuses if s["state"] == "ready")
    assert ready["model"]
    reports = [r for token, rs in client.progress_reports.items() for r in rs]
    kinds = [r.kind for r in reports]
    assert "begin" in kinds and "end" in kinds
    assert any(getattr(r, "title", None) == "dg-lsp: loading model" for r in reports)


async def test_code_action_execute_command_apply_edit_round_trip(client):
    uri = "file:///roundtrip.txt"
    open_doc(client, uri, TEXT, "plaintext")
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), range=T.Range(pos(1, 4), pos(1, 13)),  # "a epsilon"
        context=T.CodeActionContext(diagnostics=[])))
    assert [a.title for a in actions] == ["Fill hole", "Rewrite selection"]
    for action in actions:
        before = len(client.applied_edits)
        result = await client.workspace_execute_command_async(
            T.ExecuteCommandParams(command=action.command, arguments=action.arguments))
        assert result["applied"] is True and result["reason"] is None, result
        assert set(result) == {"applied", "reason", "latencyMs"}
        assert len(client.applied_edits) == before + 1  # exactly one applyEdit: one undo step
        edit = client.applied_edits[-1].edit
        assert edit.changes is None and len(edit.document_changes) == 1
        doc_edit = edit.document_changes[0]
        assert doc_edit.text_document.uri == uri and doc_edit.text_document.version == client.versions[uri]
        assert len(doc_edit.edits) == 1 and doc_edit.edits[0].new_text
    rewrite = client.applied_edits[-1].edit.document_changes[0].edits[0]
    assert rewrite.range.start.line == 1  # the selection's line (the hole may widen to whole lines)


async def test_drafts_stream_every_step_then_done(client):
    uri = "file:///drafts.txt"
    open_doc(client, uri, TEXT, "plaintext")
    await client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="dg.fillHole", arguments=[{"textDocument": {"uri": uri}, "position": {"line": 3, "character": 4}}]))
    drafts = [d for d in client.drafts if d["uri"] == uri]
    steps = [d["step"] for d in drafts if not d["done"]]
    assert steps == list(range(1, len(steps) + 1)) and 1 <= len(steps) <= SETTINGS["steps"]
    assert drafts[-1]["done"] and drafts[-1]["version"] == 1
    assert {d["requestId"] for d in drafts} == {drafts[0]["requestId"]}
    assert drafts[0]["range"]["start"] == {"line": 3, "character": 4}


def request_statuses(client, uri: str) -> list[dict]:
    return [s["request"] for s in client.statuses if s.get("request", {}).get("uri") == uri]


async def status_after(client, uri: str, n: int) -> dict:
    """The dg/status request figures of the n-th answer on `uri` (0-based; sent after the answer: wait)."""
    await wait_for(lambda: len(request_statuses(client, uri)) > n)
    return request_statuses(client, uri)[n]


CURSORS = [pos(1, 13), pos(0, 16), pos(3, 14), pos(1, 5), pos(0, 5), pos(3, 4)]


async def first_multichar_fill(client) -> tuple[str, T.InlineCompletionParams, T.InlineCompletionItem]:
    """A document and cursor where the tiny random model's fill survives post-processing with two or more
    characters (which cursors do depends on the random weights and the sampler's draws), each tried on a document
    of its own so its dg/status figures are that document's first."""
    for i, cursor in enumerate(CURSORS):
        uri = f"file:///inline{i}.txt"
        open_doc(client, uri, TEXT, "plaintext")
        params = T.InlineCompletionParams(
            text_document=T.TextDocumentIdentifier(uri=uri), position=cursor,
            context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Automatic))
        first = await client.text_document_inline_completion_async(params)
        if first is not None and len(first.items[0].insert_text) >= 2:
            return uri, params, first.items[0]
    pytest.fail(f"no cursor of {CURSORS} got a fill of two or more characters")


async def test_inline_completion_then_lru_then_typed_ahead(client):
    uri, params, item = await first_multichar_fill(client)
    cursor = params.position
    assert item.range.start == cursor and item.range.end.line == cursor.line  # one line, from the cursor
    assert isinstance(item.insert_text, str) and item.insert_text
    cold = await status_after(client, uri, 0)
    assert cold["cached"] is False and cold["steps"] >= 1
    assert cold["respondedMs"] >= cold["engineMs"] > 0  # the server's time, didChange/request to answer written

    # Elsewhere, then back: the typed-ahead record is for the other cursor, the LRU still has this canvas.
    answered = 1
    for other in (c for c in CURSORS if c != cursor):  # a cursor whose item replaces the one shown
        params.position = other
        shown = await client.text_document_inline_completion_async(params)
        answered += 1
        if shown is not None:
            break
    else:
        pytest.fail("no other cursor got an item")
    params.position = cursor
    again = await client.text_document_inline_completion_async(params)
    assert again.items[0].insert_text == item.insert_text
    lru = await status_after(client, uri, answered)
    assert lru["cached"] == "lru" and lru["steps"] == 0

    typed, rest = item.insert_text[0], item.insert_text[1:]
    edit_doc(client, uri, cursor.line, cursor.character, typed)
    params.position = pos(cursor.line, cursor.character + len(typed)) if "\n" not in typed else pos(cursor.line + 1, 0)
    ahead = await client.text_document_inline_completion_async(params)
    assert (await status_after(client, uri, answered + 1))["cached"] == "typed-ahead"
    assert ahead.items[0].insert_text == rest


async def test_completion_fallback(client):
    uri = "file:///completion.txt"
    open_doc(client, uri, TEXT, "plaintext")
    res = await client.text_document_completion_async(T.CompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=pos(0, 16)))
    assert res is not None and len(res.items) == 1
    assert res.items[0].text_edit is not None and res.items[0].text_edit.new_text


async def test_incremental_changes_reach_the_server_document(client):
    uri = "file:///incremental.txt"
    open_doc(client, uri, "", "plaintext")
    arg = {"textDocument": {"uri": uri}, "position": {"line": 2, "character": 4}}
    with pytest.raises(Exception, match="outside the document"):
        await client.workspace_execute_command_async(T.ExecuteCommandParams(command="dg.fillHole",
                                                                            arguments=[arg]))
    edit_doc(client, uri, 0, 0, "one two\nthree\n")
    edit_doc(client, uri, 1, 5, " four\n    five")  # "one two\nthree four\n    five\n"
    edit_doc(client, uri, 1, 0, "", end=(1, 6))  # "one two\nfour\n    five\n"
    version = client.versions[uri]
    result = await client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="dg.fillHole", arguments=[arg]))
    assert result["applied"], result
    doc_edit = client.applied_edits[-1].edit.document_changes[0]
    assert doc_edit.text_document.version == version
    assert doc_edit.edits[0].range.start == pos(2, 4)
    # The server's text has "    five" on line 2: the draft range is the hole it computed there.
    assert [d for d in client.drafts if d["uri"] == uri][-1]["range"]["start"] == {"line": 2, "character": 4}


async def test_status_reports_each_request(client):
    uri = "file:///status.txt"
    open_doc(client, uri, TEXT, "plaintext")
    await client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="dg.fillHole", arguments=[{"textDocument": {"uri": uri}, "position": {"line": 0, "character": 5}}]))
    last = client.statuses[-1]
    req = last["request"]
    assert last["state"] == "ready" and last["lastLatencyMs"] == round(req["totalMs"], 1)
    assert req["uri"] == uri and req["version"] == 1 and 1 <= req["steps"] <= SETTINGS["steps"]
    assert req["cached"] is False and req["reason"] is None and req["canvasLength"] in (16, 32, 64)
    assert req["serverMs"] == round(req["totalMs"] - req["engineMs"], 3)  # the handler's time without the engine
    assert requests_done(client, req["id"])


async def test_a_keystroke_reuses_the_engine_prefix_cache(client):
    """Typing at the end of a document changes only the prompt's tail (suffix-first layout): the next fill
    reuses the engine's KV cache of the common prefix, and says so."""
    uri = "file:///prefix.txt"
    text = TEXT * 12
    open_doc(client, uri, text, "plaintext")
    last = text.count("\n")
    fill = {"textDocument": {"uri": uri}, "position": {"line": last, "character": 0}}
    await client.workspace_execute_command_async(T.ExecuteCommandParams(command="dg.fillHole", arguments=[fill]))
    first = client.statuses[-1]["request"]
    client.apply_result = False  # keep the document as typed below: the client refuses the fills
    edit_doc(client, uri, last, 0, "omega")
    fill["position"] = {"line": last, "character": 5}
    await client.workspace_execute_command_async(T.ExecuteCommandParams(command="dg.fillHole", arguments=[fill]))
    second = client.statuses[-1]["request"]
    assert first["reusedPrefixTokens"] == 0 and first["contextTokens"] > 64
    assert 0 < second["reusedPrefixTokens"] < second["contextTokens"]


async def test_language_filter_and_disable(client):
    uri = "file:///filtered.py"
    open_doc(client, uri, "x = 1\n", "python")
    params = T.InlineCompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=pos(0, 5),
        context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Invoked))
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"settings": {"dg": {"languages": ["rust"]}}}))
    assert await client.text_document_inline_completion_async(params) is None
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"dg": {"languages": None, "enabled": False}}))
    await wait_for(lambda: client.statuses[-1]["state"] == "disabled")
    assert await client.text_document_inline_completion_async(params) is None
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"enabled": True}))
    await wait_for(lambda: client.statuses[-1]["state"] == "ready")


async def test_command_reports_work_done_progress(client):
    uri = "file:///progress.txt"
    open_doc(client, uri, TEXT, "plaintext")
    token = "client-token-1"
    client.progress_reports[token] = []  # a client-created token (pytest-lsp warns about unknown ones)
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="dg.fillHole", work_done_token=token,
        arguments=[{"textDocument": {"uri": uri}, "position": {"line": 3, "character": 4}}]))
    assert res["applied"]
    await wait_for(lambda: client.progress_reports[token] and client.progress_reports[token][-1].kind == "end")
    kinds = [r.kind for r in client.progress_reports[token]]
    assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds


async def test_the_reparse_runs_while_the_server_is_idle(client):
    """A change is not reparsed on the keystroke path; the loop does it in slices while idle, so a request
    after a pause sees a fresh tree (dg/status treeFresh)."""
    uri = "file:///reparse.py"
    open_doc(client, uri, "def f(a):\n    return a\n", "python")
    edit_doc(client, uri, 1, 12, " + (a")
    await asyncio.sleep(0.3)
    params = T.InlineCompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=pos(1, 17),
        context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Automatic))
    await client.text_document_inline_completion_async(params)
    assert (await status_after(client, uri, 0))["treeFresh"] is True


async def test_keystroke_figures_and_the_check_prepared_while_the_engine_runs(client):
    """A keystroke's dg/status: the server's time from the didChange to the answer handed over, split into stages
    that add up to it (with the idle wait for the request and the engine's time apart), and the syntax check's
    baseline prepared on the loop during the engine's steps."""
    uri = "file:///figures.py"
    open_doc(client, uri, "def f(a):\n    return a\n\nprint(f(1))\n", "python")
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"steps": 48}))
    try:
        edit_doc(client, uri, 1, 12, " +")
        await asyncio.sleep(0.05)  # the server waits for the request: that wait is the client's time
        await client.text_document_inline_completion_async(T.InlineCompletionParams(
            text_document=T.TextDocumentIdentifier(uri=uri), position=pos(1, 14),
            context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Automatic)))
        st = await status_after(client, uri, 0)
    finally:
        client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"steps": 6}))
    assert st["steps"] >= 2 and st["reason"] in (None, "empty fill")
    assert st["checkPrepared"] is True
    assert st["respondedMs"] >= st["waitMs"] + st["engineMs"]
    stages = st["stagesMs"]  # contiguous: together they are the server's own time
    assert tuple(stages) == STAGES
    assert min(stages.values()) >= 0
    assert abs(sum(stages.values()) - (st["respondedMs"] - st["waitMs"] - st["engineMs"])) < 0.05
