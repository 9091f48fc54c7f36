"""The LSP handlers, one module per request family, each with a `register(dispatch, session)` that dg_lsp.server
calls: it adds the family's methods to the dispatcher (dg_lsp.dispatch), bound to the session (dg_lsp.session).

Each handler is thin: a request that reads a document has an `arrive` part (run as the message is read: its
params checked, the snapshot taken) and a `run(received, params)` part that works on that snapshot, with the
session's services (settings, the worker and the fill pipeline, caches, dg/status, the `Client` for messages to the
editor), calling pure functions or the fill pipeline. Each module says where its code runs (the event loop; the
engine thread only through dg_lsp.worker)."""
