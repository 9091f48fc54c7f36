"""Next-edit suggestions (docs/PROTOCOL.md "Next edits"): after an edit, the follow-up change around the cursor.

    didChange -> history (the document's recent edits) ... copilotInlineEdit -> window (the editable lines around
    the cursor) -> prompt (the window as a seeded canvas, the history before it) -> the fill pipeline (engine
    thread) -> output (the answer diffed into minimal edits, filtered) -> the edits, tied to (open, version).

The handler is dg_lsp.handlers.nextedit; the engine work is the same pipeline as a fill (dg_lsp.fill.pipeline).

state holds the session's part: each document's history, the proposals shown, and the counts dg/status reports.
"""
