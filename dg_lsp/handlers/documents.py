"""Document sync: didOpen, didChange, didClose. Runs on the event loop: each handler mutates the document store
at once, in arrival order (the dispatcher, dg_lsp.wire.dispatch, calls them as each message is read), and leaves the
reparse to the background (`catch_up`). The session services they use are `SyncSession`
(dg_lsp.handlers.services)."""

from __future__ import annotations

import logging

from lsprotocol import types as T

from dg_lsp.handlers.services import SyncSession
from dg_lsp.wire.dispatch import Dispatcher

log = logging.getLogger(__name__)
OPEN_PARSE_S = 0.05  # didOpen parses this long on the loop; a bigger file finishes in the background


def register(dispatch: Dispatcher, ls: SyncSession) -> None:
    def did_open(params: T.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        ls.worker.cancel_document(d.uri, "reopened")
        ls.shown.pop(d.uri, None)
        ls.withheld.pop(d.uri, None)
        ls.next_edits.closed(d.uri)
        doc = ls.store.open(d.uri, d.language_id, d.version, d.text, OPEN_PARSE_S)
        if not doc.tree_fresh:
            ls.catch_up(d.uri)
        ls.cross_file.opened(d.uri)

    def did_change(params: T.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        arrived = ls.clock.received_at
        ls.worker.cancel_document(uri, "newer edit")  # a keystroke stops the engine within one step
        doc = ls.store.get(uri)
        if doc is None:
            log.warning("didChange for a document that is not open: %s", uri)
            return
        before, before_version, starts = doc.text, doc.version, doc.starts
        ls.store.change(uri, params.text_document.version, params.content_changes, ls.encoding)
        ls.next_edits.changed(uri, before_version, doc, before, starts, params.content_changes, ls.encoding)
        ls.catch_up(uri)  # the reparse, in slices, while no fill runs
        ls.note_change(uri, arrived)
        ls.cross_file.changed(uri)

    def did_save(params: T.DidSaveTextDocumentParams) -> None:
        ls.cross_file.saved(params.text_document.uri)

    def did_close(params: T.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.worker.cancel_document(uri, "closed")
        ls.shown.pop(uri, None)
        ls.withheld.pop(uri, None)
        ls.next_edits.closed(uri)
        ls.note_change(uri, None)
        ls.store.close(uri)
        ls.cross_file.closed(uri)
        ls.release_memory_soon()

    dispatch.notification(T.TEXT_DOCUMENT_DID_OPEN, did_open)
    dispatch.notification(T.TEXT_DOCUMENT_DID_CHANGE, did_change)
    dispatch.notification(T.TEXT_DOCUMENT_DID_SAVE, did_save)
    dispatch.notification(T.TEXT_DOCUMENT_DID_CLOSE, did_close)
