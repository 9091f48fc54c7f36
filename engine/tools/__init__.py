"""Command-line tools on a loaded checkpoint: check (`dg-lsp check`), profiling, calibrate
(`dg-lsp calibrate`)."""
