"""What clients see of code actions, commands, completion items and params (issue 21, items 6 and 8: found with
eglot), over stdio with the real server on a tiny random checkpoint: kinds and `context.only`, a range that is just
the word at the cursor, an applyEdit answered with an error or with null, completion items that keep the typed
word, positions that are not integers.

Documents are "plaintext" (no grammar: no fill is refused for its syntax); fills are random text, so the tests
check where edits go and what the items say, never the fill itself.
"""

from __future__ import annotations

import asyncio
import itertools
from concurrent.futures import Future
from typing import Any

import pytest_asyncio
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig
from pytest_lsp.client import make_test_lsp_client
from server_harness import CAPABILITIES, open_doc, server_command, server_env, stop_server, wait_for

from dg_lsp.devtools.client import as_dict, record
from dg_lsp.documents import Document
from dg_lsp.fill.edits import lsp_completion_item
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.handlers.commands import is_word, kind_within

SETTINGS = {"steps": 4, "debounceMs": 0}
TEXT = "total = sum(val\nalpha beta gamma\n"
LITERALS = T.CodeActionClientCapabilities(code_action_literal_support=T.ClientCodeActionLiteralOptions(
    code_action_kind=T.ClientCodeActionKindOptions(value_set=["quickfix", "refactor", "refactor.rewrite"])))


async def start(model, code_action=None, apply=None):
    """A recorded client (dg_lsp.devtools.client) whose applyEdit answers come from `apply`, with `code_action` caps."""
    caps = CAPABILITIES
    if code_action is not None:
        caps = T.ClientCapabilities(window=caps.window, workspace=caps.workspace,
                                    text_document=T.TextDocumentClientCapabilities(
                                        completion=caps.text_document.completion, code_action=code_action))
    config = ClientServerConfig(server_command=server_command(model), server_env=server_env(),
                                client_factory=lambda: record(make_test_lsp_client(), apply=apply))
    client = await config.start()
    await client.initialize_session(T.InitializeParams(capabilities=caps, initialization_options=SETTINGS))
    await wait_for(lambda: any(s["state"] == "ready" for s in client.statuses), timeout=60)
    return client


@pytest_asyncio.fixture
async def literal_client(tiny_ckpt):
    c = await start(tiny_ckpt, LITERALS)
    yield c
    await stop_server(c)


@pytest_asyncio.fixture
async def plain_client(tiny_ckpt):
    c = await start(tiny_ckpt)
    yield c
    await stop_server(c)


def pos(line: int, char: int) -> T.Position:
    return T.Position(line=line, character=char)


def wire(line: int, char: int) -> dict:
    return {"line": line, "character": char}


_ids = itertools.count(1)


async def raw_request(client, method: str, params: Any) -> Any:
    """Send `params` exactly as given and return the result as JSON (dicts): the typed client would turn a
    CodeAction holding a command into a Command, and cannot send a position that is not an integer."""
    msg_id = f"raw-{next(_ids)}"
    future: Future = Future()
    client.protocol._request_futures[msg_id] = future  # noqa: SLF001 -- pygls files answers by id here
    client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})  # noqa: SLF001
    return as_dict(await asyncio.wrap_future(future))


async def actions(client, uri: str, start: tuple[int, int], end: tuple[int, int], only: list[str] | None = None
                  ) -> list[dict]:
    context: dict[str, Any] = {"diagnostics": []} if only is None else {"diagnostics": [], "only": only}
    return await raw_request(client, T.TEXT_DOCUMENT_CODE_ACTION, {"textDocument": {"uri": uri}, "range": {
        "start": wire(*start), "end": wire(*end)}, "context": context})


# ---- kinds and context.only -----------------------------------------------------------------------------------


async def test_code_actions_carry_their_kinds_for_a_client_that_takes_code_action_literals(literal_client):
    uri = "file:///kinds.txt"
    open_doc(literal_client, uri, TEXT, "plaintext")
    got = await actions(literal_client, uri, (1, 0), (1, 10))  # "alpha beta": a selection
    assert [(a["title"], a["kind"]) for a in got] == [("Fill hole", "quickfix"),
                                                      ("Rewrite selection", "refactor.rewrite")]
    assert [a["command"]["command"] for a in got] == ["dg.fillHole", "dg.rewriteSelection"]
    rewrite = got[1]["command"]
    result = await literal_client.workspace_execute_command_async(
        T.ExecuteCommandParams(command=rewrite["command"], arguments=rewrite["arguments"]))
    assert result["applied"] is True, result
    (doc_edit,) = literal_client.applied_edits[-1].edit.document_changes
    assert doc_edit.edits[0].range.start == pos(1, 0)


ONLY = [
    (["quickfix"], ["Fill hole"]),
    (["refactor.rewrite"], ["Rewrite selection"]),
    (["refactor"], ["Rewrite selection"]),  # a parent kind asks for its sub-kinds
    (["quickfix", "refactor.rewrite"], ["Fill hole", "Rewrite selection"]),
    (["source"], []),
    (["refactor.rewrite.more"], []),  # a sub-kind does not ask for its parent
    (["quick"], []),  # a prefix of a name is not a parent kind
    ([], []),
]


async def test_context_only_keeps_the_kinds_it_names_and_their_sub_kinds(literal_client):
    uri = "file:///only.txt"
    open_doc(literal_client, uri, TEXT, "plaintext")
    for only, titles in ONLY:
        got = await actions(literal_client, uri, (1, 0), (1, 10), only=only)
        assert [a["title"] for a in got] == titles, only


async def test_a_client_without_literals_gets_commands_filtered_by_kind_too(plain_client):
    uri = "file:///plain.txt"
    open_doc(plain_client, uri, TEXT, "plaintext")
    got = await actions(plain_client, uri, (1, 0), (1, 10))
    assert [(a["title"], a["command"]) for a in got] == [("Fill hole", "dg.fillHole"),
                                                         ("Rewrite selection", "dg.rewriteSelection")]
    assert all("kind" not in a for a in got)  # plain Commands
    only = await actions(plain_client, uri, (1, 0), (1, 10), only=["refactor"])
    assert [a["command"] for a in only] == ["dg.rewriteSelection"]


def test_kind_within():
    assert kind_within("refactor.rewrite", "refactor") and kind_within("refactor.rewrite", "refactor.rewrite")
    assert kind_within("quickfix", "")  # the empty kind: all
    assert not kind_within("refactor", "refactor.rewrite") and not kind_within("refactorx", "refactor")


# ---- a range that is just the word at the cursor ----------------------------------------------------------------


async def test_the_word_at_the_cursor_is_the_cursor_at_its_end_not_a_selection(literal_client):
    """eglot with no region sends the bounds of the symbol at point: after typing `sum(val` that is `val`."""
    uri = "file:///word.txt"
    open_doc(literal_client, uri, TEXT, "plaintext")
    got = await actions(literal_client, uri, (0, 12), (0, 15))  # "val"
    assert [a["title"] for a in got] == ["Fill hole"]
    (arg,) = got[0]["command"]["arguments"]
    assert arg["position"] == wire(0, 15)  # after `val`, not before it
    result = await literal_client.workspace_execute_command_async(
        T.ExecuteCommandParams(command="dg.fillHole", arguments=[arg]))
    assert result["applied"] is True, result
    (doc_edit,) = literal_client.applied_edits[-1].edit.document_changes
    assert doc_edit.edits[0].range.start == pos(0, 15)


RANGES = [  # (start, end) -> the titles offered, where "Fill hole" fills
    ((0, 12), (0, 15), ["Fill hole"], (0, 15)),  # `val`: a whole word
    ((0, 15), (0, 12), ["Fill hole"], (0, 15)),  # the same, given backwards
    ((1, 6), (1, 10), ["Fill hole"], (1, 10)),  # `beta`, between spaces
    ((0, 12), (0, 14), ["Fill hole", "Rewrite selection"], (0, 12)),  # `va`: part of a word is a selection
    ((0, 8), (0, 15), ["Fill hole", "Rewrite selection"], (0, 8)),  # `sum(val`
    ((1, 5), (1, 10), ["Fill hole", "Rewrite selection"], (1, 5)),  # ` beta`: a space in it
    ((0, 12), (1, 5), ["Fill hole", "Rewrite selection"], (0, 12)),  # across lines
    ((1, 3), (1, 3), ["Fill hole"], (1, 3)),  # empty: the cursor
]


async def test_which_ranges_are_selections(literal_client):
    uri = "file:///ranges.txt"
    open_doc(literal_client, uri, TEXT, "plaintext")
    for start, end, titles, at in RANGES:
        got = await actions(literal_client, uri, start, end)
        assert [a["title"] for a in got] == titles, (start, end)
        assert got[0]["command"]["arguments"][0]["position"] == wire(*at), (start, end)


def test_is_word():
    text = "größe = f($x, a_1) + 12"
    assert is_word(text, 0, 5)  # non-ASCII letters are word characters
    assert is_word(text, 10, 12) and is_word(text, 14, 17) and is_word(text, 21, 23)  # `$x`, `a_1`, `12`
    assert not is_word(text, 0, 4) and not is_word(text, 1, 5)  # part of a word
    assert not is_word(text, 8, 10) and not is_word(text, 5, 5) and not is_word(text, 13, 17)


# ---- workspace/applyEdit answered with an error ----------------------------------------------------------------


async def test_an_apply_edit_answered_with_an_error_or_null_is_applied_false_with_the_reason(tiny_ckpt):
    answers = iter(["error", "error", "null", "error"])

    def apply(params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult | None:
        if next(answers) == "error":
            raise JsonRpcException("User cancelled server edit", code=-32001)  # what eglot answers on "n"
        return None

    client = await start(tiny_ckpt, apply=apply)
    try:
        uri = "file:///refused.txt"
        open_doc(client, uri, TEXT, "plaintext")
        fill = {"command": "dg.fillHole", "arguments": [{"textDocument": {"uri": uri}, "position": wire(1, 5)}]}
        rewrite = {"command": "dg.rewriteSelection", "arguments": [{"textDocument": {"uri": uri}, "range": {
            "start": wire(1, 0), "end": wire(1, 10)}}]}
        for params, reason in [(fill, "User cancelled server edit"), (rewrite, "User cancelled server edit"),
                               (fill, "malformed response"), (fill, "User cancelled server edit")]:
            result = await raw_request(client, T.WORKSPACE_EXECUTE_COMMAND, params)
            assert result["applied"] is False, result
            assert result["reason"] == f"the client did not apply the edit: {reason}", result
        assert len(client.applied_edits) == 4  # each asked once, and the server kept serving
    finally:
        await stop_server(client)


# ---- completion items keep the typed word ----------------------------------------------------------------------


async def test_completion_item_keeps_the_typed_word(plain_client):
    uri = "file:///complete.txt"
    open_doc(plain_client, uri, "total = sum(größe\n", "plaintext")
    res = await plain_client.text_document_completion_async(T.CompletionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), position=pos(0, 17)))
    (item,) = res.items
    edit = item.text_edit
    assert (edit.range.start, edit.range.end) == (pos(0, 12), pos(0, 17))  # from the word's start to the cursor
    assert edit.new_text.startswith("größe") and len(edit.new_text) > len("größe")
    assert item.filter_text == edit.new_text and item.label.startswith("größe")


def test_completion_item_filter_text_and_range():
    doc = Document("file:///t.py", "python", 1, "x = sum(val\ny = 1\n")
    snap = doc.snapshot()
    cursor = snap.text.index("\n")
    item = lsp_completion_item(snap, hole_at_cursor(snap, cursor), cursor, "ues)", "utf-16")
    assert item.filter_text == item.text_edit.new_text == "values)"
    assert item.label == "values)"
    assert (item.text_edit.range.start.character, item.text_edit.range.end.character) == (8, 11)
    after_space = Document("file:///u.py", "python", 1, "x = \n").snapshot()
    item = lsp_completion_item(after_space, hole_at_cursor(after_space, 4), 4, "42", "utf-16")
    assert item.filter_text == item.text_edit.new_text == "42"
    assert item.text_edit.range.start.character == 4


# ---- positions that are not integers ------------------------------------------------------------------------------

BAD = [{"line": "0", "character": 1}, {"line": 0, "character": 1.5}, {"line": 0.0, "character": 1},
       {"line": True, "character": 1}, {"line": 0, "character": None}, {"line": 0}, "0:1", [0, 1]]


async def test_positions_that_are_not_integers_are_invalid_params_everywhere(plain_client):
    """cattrs coerced them (`"3"` was line 3, `1.5` character 1); docs/PROTOCOL.md says -32602."""
    uri = "file:///strict.txt"
    open_doc(plain_client, uri, TEXT, "plaintext")
    doc = {"uri": uri}
    for bad in BAD:
        requests = [
            (T.TEXT_DOCUMENT_INLINE_COMPLETION, {"textDocument": doc, "position": bad, "context": {"triggerKind": 1}}),
            (T.TEXT_DOCUMENT_COMPLETION, {"textDocument": doc, "position": bad}),
            (T.TEXT_DOCUMENT_CODE_ACTION, {"textDocument": doc, "range": {"start": wire(0, 0), "end": bad},
                                           "context": {"diagnostics": []}}),
            (T.WORKSPACE_EXECUTE_COMMAND, {"command": "dg.fillHole", "arguments": [
                {"textDocument": doc, "position": bad}]}),
            (T.WORKSPACE_EXECUTE_COMMAND, {"command": "dg.rewriteSelection", "arguments": [
                {"textDocument": doc, "range": {"start": bad, "end": wire(1, 3)}}]}),
        ]
        for method, params in requests:
            try:
                answer = await raw_request(plain_client, method, params)
            except JsonRpcException as error:
                assert error.code == -32602, (method, bad, error)
                assert "Traceback" not in error.message and ".py" not in error.message, error.message
            else:
                raise AssertionError(f"{method} with position {bad!r} was answered: {answer!r}")
    # A didChange with such a range changes nothing (it is reported, not applied), and the server still serves.
    plain_client.protocol._send_data({"jsonrpc": "2.0", "method": T.TEXT_DOCUMENT_DID_CHANGE, "params": {  # noqa: SLF001
        "textDocument": {"uri": uri, "version": 2},
        "contentChanges": [{"range": {"start": {"line": "0", "character": 0}, "end": wire(0, 0)}, "text": "X"}]}})
    state = await raw_request(plain_client, "dg/documentState", {"textDocument": doc})
    assert state["version"] == 1 and state["length"] == len(TEXT)
    ok = await raw_request(plain_client, T.TEXT_DOCUMENT_CODE_ACTION, {"textDocument": doc, "range": {
        "start": wire(1, 0), "end": wire(1, 10)}, "context": {"diagnostics": []}})
    assert [a["title"] for a in ok] == ["Fill hole", "Rewrite selection"]
