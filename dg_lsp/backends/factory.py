"""Build the engine.seam.InfillBackend the settings ask for: `embedded`, `service` or `openai`."""

from __future__ import annotations

from dg_lsp.config import BACKENDS, Settings
from engine.seam import InfillBackend


def build_backend(settings: Settings) -> InfillBackend:
    """Blocking (loads a model or connects to a server): call it on the engine thread."""
    backend = settings.backend
    if backend == "service":
        from dg_lsp.backends.service import ServiceBackend

        return ServiceBackend.connect(settings)
    if backend == "openai":
        from dg_lsp.backends.openai import OpenAIBackend

        return OpenAIBackend.connect(settings)
    if backend == "embedded":
        from dg_lsp.backends.loading import load_engine

        return load_engine(settings)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
