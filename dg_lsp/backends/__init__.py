"""Backends behind the engine seam (engine.seam), and where they are built: factory (`build_backend` picks one from
the settings), loading (the embedded engine's loader and the checks before "ready"), checkpoint (a checkpoint's
tokenizer and prompt format read from its small files, no weights), service (the project's engine service over
HTTP) and autostart (one service per user, machine and model, started on demand), openai (OpenAI-compatible
servers; vLLM serving DiffusionGemma is the documented case), remote (what the two remote backends share)."""
