"""Next edits (docs/PROTOCOL.md "Next edits"): textDocument/copilotInlineEdit, textDocument/didShowInlineEdit and
the command dg.acceptNextEdit, with Copilot's payload so that clients written for it (copilot-lsp, sidekick.nvim)
can drive dg-lsp.

A request reads top to bottom like a keystroke's fill: the document as the request saw it, whether to answer (the
version it names, the setting, the model), the window, the prompt and the engine (the fill pipeline with a next
edit's Shape, on the engine thread, cancelled by the next didChange and superseded by a newer request for the
document), then the proposal judged (dg_lsp.nextedit.output) and sent as edits against the request's version.
Every answer is `{"edits": [...]}`; empty when there is nothing to propose, whatever the reason (dg/status says
which, and counts it). The session services these use are `NextEditSession` (dg_lsp.handlers.services); the
window is budgeted and tokenized with the backend the fill then runs on (`Worker.loaded`, handed to the fill).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidParams

from dg_lsp.documents import Encoding, Snapshot
from dg_lsp.fill.edits import to_lsp_range
from dg_lsp.fill.pipeline import Shape
from dg_lsp.handlers.services import NextEditSession
from dg_lsp.nextedit.output import TextEdit, finish, judge
from dg_lsp.nextedit.prompt import build_next_edit_prompt, window_budget, window_hole
from dg_lsp.nextedit.window import editable_window
from dg_lsp.session import Received
from dg_lsp.wire.dispatch import Dispatcher

INLINE_EDIT = "textDocument/copilotInlineEdit"
DID_SHOW = "textDocument/didShowInlineEdit"
ACCEPT = "dg.acceptNextEdit"
MAX_POSITION = 2**31 - 1
NO_EDITS: dict[str, Any] = {"edits": []}


@dataclass(frozen=True)
class Ask:
    """copilotInlineEdit's params, checked."""

    uri: str
    version: int | None
    position: T.Position
    trigger: int


def register(dispatch: Dispatcher, ls: NextEditSession) -> None:
    ls.experimental["dgNextEdit"] = True
    dispatch.request(INLINE_EDIT, functools.partial(propose, ls), arrive=functools.partial(arrive, ls))

    def did_show(shown: Any) -> None:
        if isinstance(shown, dict) and isinstance(shown.get("item"), dict):
            ls.next_edits.counts.shown += 1

    dispatch.notification(DID_SHOW, did_show)
    dispatch.command(ACCEPT, functools.partial(accept, ls))


def arrive(ls: NextEditSession, request_id: str, params: Any) -> tuple[Ask, Received]:
    """Where the request arrives: its params checked, the document's snapshot, the trace."""
    ask = parse_ask(params)
    seen = ls.receive(request_id, ask.uri, [ask.position], INLINE_EDIT)
    ls.next_edits.counts.requested += 1
    return ask, seen


def _nat(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_POSITION


def parse_ask(p: Any) -> Ask:
    """Check copilotInlineEdit's params (Invalid Params, -32602, naming what is wrong)."""

    def bad(what: str) -> JsonRpcInvalidParams:
        return JsonRpcInvalidParams(f"{INLINE_EDIT}: {what}")

    if not isinstance(p, dict):
        raise bad("params must be an object")
    doc = p.get("textDocument")
    if not isinstance(doc, dict) or not isinstance(doc.get("uri"), str):
        raise bad("textDocument.uri (a string) is required")
    version = doc.get("version")
    if version is not None and not (isinstance(version, int) and not isinstance(version, bool)):
        raise bad("textDocument.version must be an integer")
    pos = p.get("position")
    if not isinstance(pos, dict) or not all(_nat(pos.get(k)) for k in ("line", "character")):
        raise bad(f"position must be {{line, character}} with integers in 0..{MAX_POSITION}")
    context = p.get("context", {})
    trigger = context.get("triggerKind", 2) if isinstance(context, dict) else None
    if trigger not in (1, 2) or isinstance(trigger, bool):
        raise bad("context.triggerKind must be 1 (invoked) or 2 (automatic)")
    return Ask(doc["uri"], version, T.Position(line=pos["line"], character=pos["character"]), trigger)


async def propose(ls: NextEditSession, arrived: tuple[Ask, Received], params: Any) -> dict[str, Any]:
    """One proposal for the document as the request saw it: {"edits": [...]} (see the module docstring)."""
    ask, seen = arrived
    seen.trace.mark("handler")
    state, snap = ls.next_edits, seen.snap

    def none(reason: str, message: str = "") -> dict[str, Any]:  # before any fill ran (which reports itself)
        state.withhold(reason)
        ls.send_status(message=message)
        return NO_EDITS

    if snap is None:
        return none("unknown document")
    if not ls.settings.next_edit or not ls.settings.language_enabled(snap.language_id):
        return none("disabled")
    if (ask.version is not None and ask.version != snap.version) or ls.moved_on(snap):
        return none("document changed")
    if (why := ls.not_ready()) is not None:
        return none("model not ready", why)
    if not await ls.worker.debounce(f"next-edit {snap.uri}", 0):
        return none("superseded")  # a newer request for this document answers instead
    if ls.moved_on(snap):
        return none("document changed")
    if (loaded := ls.worker.loaded) is None:  # unloaded while this waited
        return none("model not ready", f"model not ready ({ls.worker.state})")
    if not snap.tree_fresh:  # the same version (checked just above), its tree perhaps reparsed meanwhile
        snap = ls.keystroke_snapshot(snap.uri) or snap
    backend, s = loaded.backend, ls.settings
    fmt = backend.prompt_format
    cursor = ls.offset(snap, ask.position)
    win = editable_window(snap, cursor, s.next_edit_lines_above, s.next_edit_lines_below, window_budget(fmt),
                          ls.caches.encoder(backend))
    if win is None:
        return none("no window")
    hole = window_hole(snap, win)
    history = state.history.recent(snap.uri)
    build = functools.partial(build_next_edit_prompt, history=history, cursor=cursor)
    shape = Shape(build=build, finish=finish, seed_noise=s.next_edit_noise if fmt.name == "fim" else None,
                  drafts=False)
    out = await ls.fill(snap, hole, "keystroke", seen.trace, seen.id, shape=shape, loaded=loaded)
    edits: list[TextEdit] = []
    reason = out.reason
    if out.fill is not None:
        edits, reason = judge(snap, hole, out.fill, history)
    if edits and ls.moved_on(snap):  # no await since the fill: a didChange cannot have slipped in, but say so
        edits, reason = [], "document changed"
    out.stats.reason = reason
    ls.report(out.stats, seen.trace, after_answer=True)
    if not edits:
        state.withhold(reason or "empty")
        return NO_EDITS
    proposal = state.propose(snap.uri, snap.identity, len(edits))
    version = snap.version if ask.version is None else ask.version
    command = {"title": "Accept next edit", "command": ACCEPT, "arguments": [
        {"uri": snap.uri, "version": version, "documentOpen": snap.opened, "id": proposal.id}]}
    return {"edits": [{"text": text, "range": _range(snap, start, end, ls.encoding),
                       "textDocument": {"uri": snap.uri, "version": version}, "command": command}
                      for start, end, text in edits]}


def _range(snap: Snapshot, start: int, end: int, encoding: Encoding) -> dict[str, Any]:
    r = to_lsp_range(snap, start, end, encoding)
    return {"start": {"line": r.start.line, "character": r.start.character},
            "end": {"line": r.end.line, "character": r.end.character}}


def accept(ls: NextEditSession, params: T.ExecuteCommandParams) -> dict[str, Any]:
    """dg.acceptNextEdit [{uri, version, documentOpen, id}]: the client applied the proposal; its edits are marked
    accepted in the history (later proposals must not undo them). Never edits text."""
    args = params.arguments
    if not args or len(args) != 1 or not isinstance(a := args[0], dict):
        raise JsonRpcInvalidParams(f"{ACCEPT}: expected one argument object")
    uri, version, opened, pid = a.get("uri"), a.get("version"), a.get("documentOpen"), a.get("id")
    if not isinstance(uri, str) or not isinstance(version, int) or not _nat(version):
        raise JsonRpcInvalidParams(f"{ACCEPT}: uri (a string) and version (an integer) are required")
    if opened is not None and not _nat(opened):
        raise JsonRpcInvalidParams(f"{ACCEPT}: documentOpen must be a non-negative integer when given")
    if pid is not None and not isinstance(pid, str):
        raise JsonRpcInvalidParams(f"{ACCEPT}: id must be a string when given")
    accepted, reason = ls.next_edits.accept(uri, version, opened, pid)
    ls.send_status()
    return {"accepted": accepted, **({"reason": reason} if reason else {})}
