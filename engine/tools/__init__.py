"""Command-line tools on a loaded checkpoint: check (`dg-lsp --check`), profiling, calibrate
(`dg-lsp calibrate`); command (what every command line shares: one-line errors, exit codes, the log file)."""
