"""Code actions and the two commands, dg.fillHole and dg.rewriteSelection: each one fill and then exactly one
workspace/applyEdit against the document version the fill was computed for (docs/PROTOCOL.md).

Runs on the event loop (the engine job inside the fill on the engine thread). A command reads its positions
against the document as it was when the command arrived (`arrive`, run by the dispatcher as the message is read,
in order with the didChanges; see dg_lsp.session); if the document has changed by the time the fill is ready,
nothing is applied: `{"applied": false, "reason": "document changed"}`. A code action puts the document's version
in the commands it offers, so a command run after further edits is refused the same way. The session services
these use are `CommandSession` (dg_lsp.handlers.services); a command's prompt format is read from the backend the
fill then runs on (`Worker.loaded`, handed to the fill).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from dg_lsp.documents import Snapshot, offset_at
from dg_lsp.fill.edits import lsp_text_edit, to_lsp_range, word_char
from dg_lsp.fill.holes import hole_at_cursor, hole_for_selection
from dg_lsp.fill.pipeline import LOW_CONFIDENCE
from dg_lsp.handlers.services import CommandSession
from dg_lsp.session import Received
from dg_lsp.wire.dispatch import Dispatcher

FILL_HOLE = "dg.fillHole"
REWRITE_SELECTION = "dg.rewriteSelection"
KINDS = {FILL_HOLE: T.CodeActionKind.QuickFix, REWRITE_SELECTION: T.CodeActionKind.RefactorRewrite}
MAX_POSITION = 2**31 - 1  # LSP's uinteger
SELECTION_MAX_CHARS = 20_000  # a rewrite of more is refused (its prompt and canvases would be unbounded)
INSTRUCTION_MAX_CHARS = 2_000  # a rewrite's instruction is one request, not a document


def register(dispatch: Dispatcher, ls: CommandSession) -> None:
    dispatch.request(T.TEXT_DOCUMENT_CODE_ACTION, functools.partial(code_actions, ls),
                     options=T.CodeActionOptions(code_action_kinds=list(KINDS.values())))
    for name in (FILL_HOLE, REWRITE_SELECTION):
        dispatch.command(name, functools.partial(run_command, ls), arrive=functools.partial(arrive, ls))


def code_actions(ls: CommandSession, params: T.CodeActionParams) -> list[T.Command | T.CodeAction]:
    """"Fill hole" (quickfix) at the cursor, and "Rewrite selection" (refactor.rewrite) when the range is a
    selection. The cursor is the range's start, or its end when the range is just the word at the cursor (see
    `is_word`). CodeActions with their kind for a client that takes them (codeActionLiteralSupport), else plain
    Commands; `context.only` keeps the kinds it names and their sub-kinds either way. Where the confidence gate
    withheld the last command's fill in this document and version, "... anyway" (the same command with force)."""
    uri = params.text_document.uri
    identity = ls.store.identity(uri)
    document = ls.store.get(uri)
    if identity is None or document is None:
        return []
    opened, version = identity
    doc = {"uri": uri, "version": version}
    rng = params.range
    start, end = sorted(offset_at(document.text, p.line, p.character, ls.encoding, document.starts)
                        for p in (rng.start, rng.end))
    word = start != end and is_word(document.text, start, end)
    selection = start != end and not word
    cursor = max(rng.start, rng.end, key=lambda p: (p.line, p.character)) if word else rng.start
    # documentOpen: which open of the document the positions were read from (a reopened one starts at version 1)
    offered = [("Fill hole", FILL_HOLE, {"textDocument": doc, "position": cursor, "documentOpen": opened})]
    if selection:
        offered.append(("Rewrite selection", REWRITE_SELECTION, {"textDocument": doc, "range": rng, "widen": False,
                                                                 "documentOpen": opened}))
    if (anyway := _anyway(ls, uri, identity, start, end)) is not None:
        offered.append(anyway)
    only = params.context.only
    caps = ls.client.capabilities.text_document
    literals = getattr(caps and caps.code_action, "code_action_literal_support", None) is not None
    actions: list[T.Command | T.CodeAction] = []
    for title, name, arg in offered:
        if only is not None and not any(kind_within(KINDS[name], str(getattr(k, "value", k))) for k in only):
            continue
        cmd = T.Command(title=title, command=name, arguments=[arg])
        actions.append(T.CodeAction(title=title, kind=KINDS[name], command=cmd) if literals else cmd)
    return actions


def _anyway(ls: CommandSession, uri: str, identity: tuple[int, int], lo: int, hi: int
            ) -> tuple[str, str, dict[str, Any]] | None:
    """The withheld command near offsets lo..hi (in this open and version of the document) with force: true."""
    held = ls.withheld.get(uri)
    if held is None or held[0] != identity:
        return None
    _, start, end, rewrite, confidence = held
    if hi < start or lo > end:
        return None
    snap = ls.store.snapshot(uri, 0.0)
    if snap is None:
        return None
    span = to_lsp_range(snap, start, end, ls.encoding)
    doc = {"uri": uri, "version": identity[1]}
    where = {"range": {"start": span.start, "end": span.end}, "widen": False} if rewrite else {"position": span.start}
    title = f"{'Rewrite selection' if rewrite else 'Fill hole'} anyway (confidence {confidence:.2f})"
    return title, REWRITE_SELECTION if rewrite else FILL_HOLE, {"textDocument": doc, **where,
                                                                 "documentOpen": identity[0], "force": True}


def kind_within(kind: str, asked: str) -> bool:
    """LSP's hierarchical kinds: `refactor` asks for `refactor.rewrite` too; the empty kind asks for all."""
    return not asked or kind == asked or kind.startswith(asked + ".")


def is_word(text: str, start: int, end: int) -> bool:
    """Is text[start:end] (non-empty) exactly one whole word: identifier characters only (letters, digits, `_`,
    `$`), with none just before or after it? Such a range is not a selection: it is what a client sends for the
    cursor when no region is active (eglot sends the bounds of the symbol at point)."""
    if start >= end or not all(word_char(ch) for ch in text[start:end]):
        return False
    return not (start > 0 and word_char(text[start - 1])) and not (end < len(text) and word_char(text[end]))


def arrive(ls: CommandSession, request_id: str, params: T.ExecuteCommandParams) -> tuple[dict[str, Any], Received]:
    """dg.fillHole / dg.rewriteSelection where the command arrives: the arguments checked and the document's
    snapshot taken; then `run_command` runs as a task (see the module docstring)."""
    arg = parse_command_args(params.command, params.arguments)
    positions = [arg["start"], arg["end"]] if params.command == REWRITE_SELECTION else [arg["position"]]
    return arg, ls.receive(request_id, arg["uri"], positions, params.command)


async def run_command(ls: CommandSession, arrived: tuple[dict[str, Any], Received], params: T.ExecuteCommandParams
                      ) -> dict[str, Any]:
    """One fill against the snapshot taken on arrival, then exactly one workspace/applyEdit, or nothing."""
    arg, seen = arrived
    t0 = seen.trace.mark("handler")
    rewrite = params.command == REWRITE_SELECTION

    def done(applied: bool, reason: str | None) -> dict[str, Any]:
        ms = round((time.perf_counter() - t0) * 1e3, 1)
        return {"applied": applied, "reason": reason, "latencyMs": ms}

    uri, snap = arg["uri"], seen.snap
    if snap is None:
        return done(False, f"unknown document {uri}")
    if ((arg["version"] is not None and arg["version"] != snap.version)
            or (arg["open"] is not None and arg["open"] != snap.opened) or ls.moved_on(snap)):
        return done(False, "document changed")
    if rewrite:
        start, end = sorted((ls.offset(snap, arg["start"]), ls.offset(snap, arg["end"])))
        if end - start > SELECTION_MAX_CHARS:
            return done(False, f"selection too long ({end - start} characters; at most {SELECTION_MAX_CHARS})")
    else:
        start = end = ls.offset(snap, arg["position"])
    loaded = ls.worker.loaded  # the backend the fill runs on (its prompt format decides what it can do)
    if (why := ls.not_ready()) is not None or loaded is None:
        why = why or f"model not ready ({ls.worker.state})"
        ls.send_status(message=why)
        return done(False, why)
    fmt = loaded.backend.prompt_format
    instruction = arg["instruction"]
    if instruction and fmt.name != "chat":
        why = (f"this model's prompt format ({fmt.name}) cannot take an instruction; leave it empty for a plain "
               "re-fill, or use a chat-format checkpoint (setting promptFormat: chat)")
        ls.warn(why)
        return done(False, why)
    if rewrite and ls.settings.rewrite_from_selection and fmt.name != "fim":
        why = (f"rewriteFromSelection starts the canvas from the selection's tokens, which only a fill-in-the-middle "
               f"checkpoint's answer holds as they are; this model's prompt format is {fmt.name} (turn "
               "rewriteFromSelection off to rewrite from noise)")
        ls.warn(why)
        return done(False, why)
    snap = await ls.fresh_snapshot(snap)
    hole = hole_for_selection(snap, start, end, arg["widen"]) if rewrite else hole_at_cursor(snap, start)
    if instruction:
        hole = dataclasses.replace(hole, instruction=instruction)
    token = params.work_done_token
    if token is not None:
        title = "dg-lsp: rewriting selection" if rewrite else "dg-lsp: filling hole"
        ls.client.progress(token, T.WorkDoneProgressBegin(title=title, cancellable=True))
        ls.client.on_progress_cancel(token, functools.partial(cancel, ls, seen.id))
    try:
        out = await ls.fill(snap, hole, "command", seen.trace, seen.id, token, force=arg["force"], loaded=loaded)
    finally:
        if token is not None:
            ls.client.progress(token, T.WorkDoneProgressEnd())
    ls.report(out.stats, seen.trace, after_answer=False)
    if out.error is not None:  # the backend failed (a remote server's error): say so, edit nothing
        ls.warn(f"dg-lsp: the fill failed: {out.error}")
        return done(False, f"error: {out.error}")
    if out.reason == LOW_CONFIDENCE and out.confidence is not None:
        return withheld(ls, snap, start, end, rewrite, out.confidence, done(False, LOW_CONFIDENCE))
    if out.fill is None:
        return done(False, out.reason)
    edit = lsp_text_edit(snap, hole, out.fill, ls.encoding)
    # Checked with no await before the send, so no didChange can slip in between.
    if ls.moved_on(snap):
        return done(False, "document changed")
    versioned = T.OptionalVersionedTextDocumentIdentifier(uri=uri, version=snap.version)
    doc_edit = T.TextDocumentEdit(text_document=versioned, edits=[edit])
    label = "dg: rewrite selection" if rewrite else "dg: fill hole"
    try:
        res = await ls.client.apply_edit(
            T.ApplyWorkspaceEditParams(edit=T.WorkspaceEdit(document_changes=[doc_edit]), label=label))
    except JsonRpcException as error:  # the client answered with an error: not applied, and why
        return done(False, f"the client did not apply the edit: {error.message or f'error {error.code}'}")
    if res is None or not res.applied:
        return done(False, (res and res.failure_reason) or "the client did not apply the edit")
    return done(True, None)


def cancel(ls: CommandSession, request_id: str) -> None:
    """window/workDoneProgress/cancel: the job stops as a $/cancelRequest would stop it."""
    ls.worker.cancel_request(request_id, "progress cancelled")


def withheld(ls: CommandSession, snap: Snapshot, start: int, end: int, rewrite: bool, confidence: float,
             result: dict[str, Any]) -> dict[str, Any]:
    """The command's answer when the confidence gate withheld its fill: nothing edited, the user told why and how
    to apply it anyway (the "... anyway" code action, or the command again with force: true)."""
    gate = ls.min_confidence()
    ls.withheld[snap.uri] = (snap.identity, start, end, rewrite, confidence)
    what = "rewrite" if rewrite else "fill"
    message = (f"dg-lsp: {what} withheld: confidence {confidence:.2f} is below minConfidence {gate:.2f}. To apply "
               f"it anyway, run the code action \"{'Rewrite selection' if rewrite else 'Fill hole'} anyway\" here.")
    # one message, the demo model's first-time notice in it: an editor shows at most 3 notifications that arrive
    # together (its progress, this, and the extension's "Apply anyway" offer), and drops the rest
    notice = ls.demo_gate_notice()
    ls.client.show_message(T.MessageType.Info, message if notice is None else f"{message} {notice}")
    # the document it was computed for: a client that resends the command with force adds these, so an "apply
    # anyway" after an edit or a reopen is refused ("document changed") instead of landing at stale positions
    return {**result, "confidence": round(confidence, 4), "minConfidence": gate, "version": snap.version,
            "documentOpen": snap.opened}


def _nat(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_POSITION


def parse_command_args(command: str, arguments: Sequence[Any] | None) -> dict[str, Any]:
    """Validate the one argument object of dg.fillHole / dg.rewriteSelection (docs/PROTOCOL.md)."""

    def bad(what: str) -> JsonRpcInvalidParams:
        return JsonRpcInvalidParams(f"{command}: {what}")

    if not arguments or len(arguments) != 1 or not isinstance(arguments[0], dict):
        raise bad("expected one argument object")
    a = arguments[0]
    doc = a.get("textDocument")
    if not isinstance(doc, dict) or not isinstance(doc.get("uri"), str):
        raise bad("textDocument.uri (a string) is required")
    version = doc.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise bad("textDocument.version must be an integer when given")

    def pos(v: Any, name: str) -> T.Position:
        ok = isinstance(v, dict) and all(_nat(v.get(k)) for k in ("line", "character"))
        if not ok:
            raise bad(f"{name} must be {{line, character}} with integers in 0..{MAX_POSITION}")
        return T.Position(line=v["line"], character=v["character"])

    opened = a.get("documentOpen")
    if opened is not None and not _nat(opened):
        raise bad("documentOpen must be a non-negative integer when given")
    force = a.get("force", False)
    if not isinstance(force, bool):
        raise bad("force must be a boolean when given")
    out: dict[str, Any] = {"uri": doc["uri"], "version": version, "open": opened, "widen": False,
                           "instruction": None, "force": force}
    if command == REWRITE_SELECTION:
        r = a.get("range")
        if not isinstance(r, dict):
            raise bad("range is required")
        out["start"], out["end"] = pos(r.get("start"), "range.start"), pos(r.get("end"), "range.end")
        if (out["end"].line, out["end"].character) < (out["start"].line, out["start"].character):
            raise bad("range.end is before range.start")
        widen = a.get("widen", False)
        if not isinstance(widen, bool):
            raise bad("widen must be a boolean")
        out["widen"] = widen
        instruction = a.get("instruction")
        if instruction is not None and not isinstance(instruction, str):
            raise bad("instruction must be a string when given")
        if instruction is not None and len(instruction) > INSTRUCTION_MAX_CHARS:
            raise bad(f"instruction too long ({len(instruction)} characters; at most {INSTRUCTION_MAX_CHARS})")
        out["instruction"] = (instruction or "").strip() or None
    else:
        out["position"] = pos(a.get("position"), "position")
    return out
