"""Backends behind the engine seam besides the embedded engine: the project's engine service and OpenAI-compatible
servers (vLLM serving DiffusionGemma is the documented case); `factory.build_backend` picks one from the settings."""
