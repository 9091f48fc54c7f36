"""Command-line tools on a loaded checkpoint: check (`dg-lsp --check`), profiling, calibrate
(`dg-lsp calibrate`), doctor (`dg-lsp doctor`: versions, device, plan, GPU self-checks, a timed fill); command (what
every command line shares: one-line errors, exit codes, the log file)."""
