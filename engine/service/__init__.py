"""The engine service: one resident model shared by every editor on a machine, over an OpenAI-compatible HTTP API."""
