"""Keystroke requests: textDocument/inlineCompletion and textDocument/completion. Each reads top to bottom: find the
document as the request saw it, decide whether to answer, find the hole, run the fill, format the result.

Runs on the event loop; the engine job inside the fill runs on the engine thread. `arrive` runs where the request
arrives (the dispatcher runs it as the message is read: dg_lsp.wire.dispatch); each handler then works on the snapshot
it took. The session services they use are `InlineSession` (dg_lsp.handlers.services)."""

from __future__ import annotations

import functools
from typing import Any

from lsprotocol import types as T

from dg_lsp.documents import Snapshot
from dg_lsp.fill.cache import Shown, typed_ahead
from dg_lsp.fill.edits import lsp_completion_item, lsp_inline_item, to_lsp_range
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.handlers.services import InlineSession
from dg_lsp.session import Received
from dg_lsp.wire.dispatch import Dispatcher


def register(dispatch: Dispatcher, ls: InlineSession) -> None:
    for method, run, options in ((T.TEXT_DOCUMENT_INLINE_COMPLETION, inline, T.InlineCompletionOptions()),
                                 (T.TEXT_DOCUMENT_COMPLETION, completion, T.CompletionOptions())):
        dispatch.request(method, functools.partial(run, ls), arrive=functools.partial(arrive, ls, method),
                         options=options)


def arrive(ls: InlineSession, method: str, request_id: str, params: T.TextDocumentPositionParams) -> Received:
    """Where the request arrives: its position checked against the document, the snapshot, the trace."""
    return ls.receive(request_id, params.text_document.uri, [params.position], method)


async def inline(ls: InlineSession, seen: Received, params: T.InlineCompletionParams) -> dict[str, Any] | None:
    """An InlineCompletionList (as JSON, see `inline_list`) with one item, or None."""
    seen.trace.mark("handler")
    snap = usable(ls, seen)
    if snap is None:
        return None
    uri, cursor = snap.uri, ls.offset(snap, params.position)
    if (shown := ls.shown.get(uri)) is not None:
        rest = typed_ahead(shown, snap.text, cursor)
        if rest:  # "" means the whole fill was typed (or accepted): what comes next needs the engine
            ls.status_after_answer({"id": seen.id, "uri": uri, "version": snap.version,
                                    "cached": "typed-ahead", "steps": 0, "engineMs": 0.0}, seen.trace)
            end = shown.end + (cursor - shown.cursor)
            return inline_list(T.InlineCompletionItem(insert_text=rest, range=to_lsp_range(snap, cursor, end,
                                                                                           ls.encoding)))
    if not await ls.worker.debounce(uri, ls.settings.debounce_ms):
        return None  # a newer request for this document arrived: it answers instead
    # the wait let other messages run: the document may have changed, the model be reloading
    if ls.moved_on(snap) or ls.not_ready() or (loaded := ls.worker.loaded) is None:
        return None
    if not snap.tree_fresh:  # the same version (checked just above), its tree perhaps reparsed meanwhile
        snap = ls.keystroke_snapshot(uri) or snap
    hole = hole_at_cursor(snap, cursor)
    out = await ls.fill(snap, hole, "keystroke", seen.trace, seen.id, loaded=loaded)
    ls.report(out.stats, seen.trace, after_answer=True)
    fill = out.fill
    item = None if fill is None else lsp_inline_item(snap, hole, cursor, fill, ls.encoding)
    if fill is None or item is None or item.range is None:
        return None
    stop = item.range.end
    ls.shown[uri] = Shown(snap.text, cursor, fill, snap.offset_at(stop.line, stop.character, ls.encoding))
    return inline_list(item)


async def completion(ls: InlineSession, seen: Received, params: T.CompletionParams) -> T.CompletionList | None:
    """The fallback for clients without inline completion: one item whose textEdit carries the whole fill."""
    seen.trace.mark("handler")
    snap = usable(ls, seen)
    if snap is None:
        return None
    cursor = ls.offset(snap, params.position)
    hole = hole_at_cursor(snap, cursor)
    out = await ls.fill(snap, hole, "keystroke", seen.trace, seen.id)
    ls.report(out.stats, seen.trace, after_answer=True)
    if out.fill is None:
        return None
    item = lsp_completion_item(snap, hole, cursor, out.fill, ls.encoding)
    return T.CompletionList(is_incomplete=True, items=[item] if item is not None else [])


def usable(ls: InlineSession, seen: Received) -> Snapshot | None:
    """The snapshot to answer from, or None (an empty answer): the document is open, its language enabled, the
    model ready, and no didChange came after the request (its positions would be stale)."""
    snap = seen.snap
    if snap is None or not ls.settings.language_enabled(snap.language_id):
        return None
    if (why := ls.not_ready()) is not None:
        ls.send_status(message=why)
        return None
    return None if ls.moved_on(snap) else snap


def inline_list(item: T.InlineCompletionItem) -> dict[str, Any]:
    """An InlineCompletionList of `item` as JSON: dg_lsp.wire.outgoing.Client.respond writes a dict as it is, so the
    keystroke's answer skips the converter."""
    r = item.range
    out: dict[str, Any] = {"insertText": item.insert_text}
    if r is not None:
        out["range"] = {"start": {"line": r.start.line, "character": r.start.character},
                        "end": {"line": r.end.line, "character": r.end.character}}
    return {"items": [out]}
