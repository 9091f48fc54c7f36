"""The LSP handlers, one module per request family, each with a `register(dispatch, session)` that dg_lsp.server
calls: it adds the family's methods to the dispatcher (dg_lsp.wire.dispatch), bound to the session (dg_lsp.session).

Each handler is thin: a request that reads a document has an `arrive` part (run as the message is read: its
params checked, the snapshot taken) and a `run(received, params)` part that works on that snapshot, with the few
session services its family declares in dg_lsp.handlers.services (a Protocol per family: documents, the fill
pipeline with the worker and settings, the `Client` for messages to the editor), calling pure functions or the fill
pipeline. Each module says where its code runs (the event loop; the
engine thread only through dg_lsp.fill.worker).

Families: lifecycle (initialize, initialized loads the model, configuration, shutdown), documents
(didOpen, didChange, didSave, didClose), inline (inlineCompletion, completion), commands (code actions,
dg.fillHole, dg.rewriteSelection), nextedit (copilotInlineEdit, didShowInlineEdit, dg.acceptNextEdit); services
(the Protocols).
"""
