"""A scripted stand-in for dg-lsp that speaks its protocol (docs/PROTOCOL.md) with fixed answers.

The plugin tests use it where the real server's fills are random (tiny checkpoints): exact ghost text, drafts
on a known schedule, and a log of what the client asked and cancelled. Run: python stub_server.py (stdio).
initializationOptions: the dg settings plus `stubText` (the fill), `stubDelay` (seconds per draft step),
`stubSteps`, `stubCount` (that many items: the text, then the text + " #2", ...), `stubPromptFormat` ("fim":
refuse a rewrite's non-empty instruction as dg-lsp does on a fim-format checkpoint), `stubNextEdit` (the edits,
[{text, range}], every textDocument/copilotInlineEdit answers; the wire of docs/PROTOCOL.md "Next edits") and
`stubLog` (a file that gets one JSON line per event).
"""

from __future__ import annotations

import asyncio
import json
import time

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method


class StubProtocol(LanguageServerProtocol):
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        result = yield from super().lsp_initialize(params)
        result.capabilities.experimental = {"dgNextEdit": True}  # as dg-lsp says it speaks next edits
        return result


server = LanguageServer("dg-lsp-stub", "0", protocol_cls=StubProtocol)
options: dict = {}


def log(event: str, **data) -> None:
    if options.get("stubLog"):
        with open(options["stubLog"], "a") as f:
            f.write(json.dumps({"event": event, **data}) + "\n")


def status(state: str, latency: float | None = None) -> None:
    server.protocol.notify(
        "dg/status", {"state": state, "message": "", "model": "stub", "lastLatencyMs": latency}
    )


async def fill(uri: str, version: int, hole: types.Range) -> str:
    """Sleep through the steps (cancellable at each await), streaming drafts when asked to."""
    text, steps = options.get("stubText", "fill"), int(options.get("stubSteps", 4))
    for step in range(1, steps + 1):
        await asyncio.sleep(float(options.get("stubDelay", 0.05)))
        if options.get("drafts"):
            shown = text[: len(text) * step // steps]
            server.protocol.notify("dg/draft", {
                "uri": uri, "version": version, "requestId": "1", "step": step, "steps": steps,
                "text": shown, "range": hole, "done": step == steps,
            })
    return text


@server.feature(types.INITIALIZE)
def initialize(params: types.InitializeParams) -> None:
    options.update(params.initialization_options or {})
    log("initialize", options=params.initialization_options)


@server.feature(types.INITIALIZED)
def initialized(params: types.InitializedParams) -> None:
    status("loading")
    status("ready")


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
    log("configuration", settings=params.settings)


@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(params: types.InlineCompletionParams) -> list[types.InlineCompletionItem]:
    doc = server.workspace.get_text_document(params.text_document.uri)
    pos = params.position
    log("inline", line=pos.line, character=pos.character)
    start = time.perf_counter()
    status("busy")
    try:
        text = await fill(doc.uri, doc.version or 0, types.Range(pos, pos))
    except asyncio.CancelledError:
        log("cancelled", line=pos.line, character=pos.character)
        status("ready")
        raise
    status("ready", (time.perf_counter() - start) * 1000)
    log("answered", text=text)
    texts = [text] + [f"{text} #{i}" for i in range(2, int(options.get("stubCount", 1)) + 1)]
    return [types.InlineCompletionItem(insert_text=t, range=types.Range(pos, pos)) for t in texts]


@server.command("dg.rewriteSelection")
async def rewrite(arg: dict) -> dict:
    uri = arg["textDocument"]["uri"]
    r = arg["range"]
    doc = server.workspace.get_text_document(uri)
    version = doc.version
    lines = doc.lines[r["start"]["line"]: r["end"]["line"] + 1]
    log("rewrite", range=r, widen=arg.get("widen", False), argument=arg)
    instruction = arg.get("instruction")
    if options.get("stubPromptFormat") == "fim" and isinstance(instruction, str) and instruction.strip():
        reason = "this model's prompt format (fim) cannot take an instruction; use a chat-format checkpoint"
        server.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=reason))
        return {"applied": False, "reason": reason, "latencyMs": 0.1}
    await asyncio.sleep(0.05)
    new_text = "\n".join(f"rewritten_{i}()" for i in range(len(lines)))
    rng = types.Range(types.Position(**r["start"]), types.Position(**r["end"]))
    edit = types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
        edits=[types.TextEdit(range=rng, new_text=new_text)],
    )
    result = await server.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(edit=types.WorkspaceEdit(document_changes=[edit]))
    )
    return {"applied": bool(result.applied), "reason": result.failure_reason, "latencyMs": 50.0}


@server.command("dg.fillHole")
async def fill_hole(arg: dict) -> dict:
    uri, pos = arg["textDocument"]["uri"], types.Position(**arg["position"])
    doc = server.workspace.get_text_document(uri)
    version = doc.version
    log("fillHole", line=pos.line, character=pos.character)
    text = await fill(uri, version or 0, types.Range(pos, pos))
    edit = types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
        edits=[types.TextEdit(range=types.Range(pos, pos), new_text=text)],
    )
    result = await server.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(edit=types.WorkspaceEdit(document_changes=[edit]))
    )
    return {"applied": bool(result.applied), "reason": result.failure_reason, "latencyMs": 1.0}


@server.feature("textDocument/copilotInlineEdit")
async def next_edit(params) -> dict:
    """The scripted edits, for the request's version when it is the document's (else none, as dg-lsp)."""
    uri, version = params.textDocument.uri, params.textDocument.version
    doc = server.workspace.get_text_document(uri)
    log("nextEdit", version=version, documentVersion=doc.version, trigger=params.context.triggerKind,
        line=params.position.line, character=params.position.character)
    await asyncio.sleep(float(options.get("stubNextEditDelay", 0.02)))
    if version != doc.version:
        return {"edits": []}
    argument = {"uri": uri, "version": version, "documentOpen": 1, "id": "ne-1"}
    command = {"title": "Accept next edit", "command": "dg.acceptNextEdit", "arguments": [argument]}
    return {"edits": [{**e, "textDocument": {"uri": uri, "version": version}, "command": command}
                      for e in options.get("stubNextEdit", [])]}


@server.feature("textDocument/didShowInlineEdit")
def next_edit_shown(params) -> None:
    log("nextEditShown", command=params.item.command.arguments[0].id)


@server.command("dg.acceptNextEdit")
def accept_next_edit(arg: dict) -> dict:
    doc = server.workspace.get_text_document(arg["uri"])
    log("nextEditAccepted", argument=arg, text=doc.source)
    return {"accepted": True}


if __name__ == "__main__":
    server.start_io()
