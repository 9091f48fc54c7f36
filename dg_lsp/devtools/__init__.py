"""Developers' and editors' aids, not on a request's path: demo (`make demo`), client (the recording LSP
client of the demo, benchmarks and tests, and the model picker), debug (dg/debug requests)."""
