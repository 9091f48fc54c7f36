"""Context from the rest of the workspace (issue 24): an index of definitions and imports (index, symbols, ignore),
the per-hole choice of what to show from it (select) and how it is laid out in the prompt (layout)."""
