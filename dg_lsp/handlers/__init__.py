"""The LSP handlers, one module per request family, each with a `register(server)` that dg_lsp.server calls.

Each handler is thin: it reads its params, takes what it needs from the session (dg_lsp.session.DgServer) and calls
pure functions or the fill pipeline. Each module says where its code runs (the event loop; the engine thread only
through dg_lsp.worker)."""
