"""Fixtures for tests/lsp: a tiny random checkpoint built once per session (its fills are random tokens), and a
fresh dg-lsp over stdio on it per test (`client`), with the settings a module's `server_settings` fixture gives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import pytest_asyncio


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from engine.testing.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "mixed", "mixed", canvas_length=16)


@pytest.fixture
def server_settings() -> dict:
    """The dg settings `client` starts its server with; a module overrides this fixture to change them."""
    return {"debounceMs": 0}


@pytest_asyncio.fixture
async def client(tiny_ckpt, server_settings):
    """A fresh server per test (no test sees another's documents, caches or settings), initialized and ready."""
    from server_harness import start_server, stop_server

    c = await start_server(tiny_ckpt, server_settings)
    yield c
    await stop_server(c)
