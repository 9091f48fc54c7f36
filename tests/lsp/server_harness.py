"""Helpers for end-to-end server tests: pytest-lsp clients that start the real `dg-lsp` over stdio, recorded by
dg_lsp.devtools.client (every workspace/applyEdit, dg/status and dg/draft; applyEdit answered with `apply_result`), and
polling. Each test module's `client` fixture starts one server per test, so no test sees another's state."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import make_test_lsp_client

from dg_lsp.devtools.client import edit_doc, inline_params, open_doc, record, request_stats

__all__ = ["edit_doc", "inline_params", "open_doc", "request_stats", "requests_done", "server_command",
           "server_env", "start_server", "stop_server", "wait_for"]
ROOT = Path(__file__).resolve().parents[2]


def server_env() -> dict[str, str]:
    """Offline, CPU, and the checkout importable without `pip install -e .`."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p))
    return env


def server_command(model: Path | None, *extra: str) -> list[str]:
    """`python -m dg_lsp --model MODEL` (no --model: the settings name the backend and model)."""
    return [sys.executable, "-m", "dg_lsp", *(["--model", str(model)] if model is not None else []), *extra]


def make_client() -> LanguageClient:
    return record(make_test_lsp_client())


CAPABILITIES = T.ClientCapabilities(
    window=T.WindowClientCapabilities(work_done_progress=True),
    text_document=T.TextDocumentClientCapabilities(
        inline_completion=T.InlineCompletionClientCapabilities(),
        completion=T.CompletionClientCapabilities(completion_item=T.ClientCompletionItemOptions(
            documentation_format=[T.MarkupKind.Markdown, T.MarkupKind.PlainText])),
        code_action=T.CodeActionClientCapabilities(),
    ),
    workspace=T.WorkspaceClientCapabilities(apply_edit=True,
                                            workspace_edit=T.WorkspaceEditClientCapabilities(document_changes=True)),
)


async def start_server(model: Path | None, init_options: dict | None = None, wait_ready: bool = True,
                       env: dict[str, str] | None = None) -> LanguageClient:
    """The tests' one pytest-lsp client of a real server (tests/lsp's `client` fixture, tests/service): started with
    `env` (default `server_env()`), initialized with `init_options`, and with `wait_ready` its model ready."""
    config = ClientServerConfig(server_command=server_command(model), client_factory=make_client,
                                server_env=env or server_env())
    client = await config.start()
    client.init_result = await client.initialize_session(
        T.InitializeParams(capabilities=CAPABILITIES, initialization_options=init_options))
    if wait_ready:
        await wait_for(lambda: any(s["state"] in ("ready", "error") for s in client.statuses), timeout=60)
        assert client.statuses[-1]["state"] == "ready", client.statuses
    return client


async def stop_server(client: LanguageClient) -> None:
    await client.shutdown_session()
    await client.stop()


async def wait_for(pred: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """Poll `pred` until it returns something truthy (the client's recorders fill in from the event loop)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = pred()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"timed out waiting for {what or pred}")
        await asyncio.sleep(0.005)


def requests_done(client: LanguageClient, request_id: str) -> list[dict]:
    """dg/status bodies that report on request `request_id` (after the engine or cache answered)."""
    return [s["request"] for s in client.statuses if s.get("request") and s["request"].get("id") == request_id]
