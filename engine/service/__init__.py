"""The engine service: one resident model shared by every editor on a machine, over an OpenAI-compatible HTTP API.
cli (`dg-lsp serve-engine`) -> app (the HTTP routes) -> requests (OpenAI bodies <-> engine jobs) -> scheduler (one
fill at a time, clients in turn; engine.seam_jobs) -> the engine; chat (the served chat template) and stop (stop
strings)."""
