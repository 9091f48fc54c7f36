"""Context from the rest of the workspace (issue 24): workspace (the session's index, built and kept current in idle
slices), index, symbols and ignore (definitions and imports per file; which files are skipped), resolve (the files
an import names, per language), select (the per-hole choice of what to show) and layout (how it is laid out at the
head of the prompt)."""
