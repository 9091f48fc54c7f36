"""Helpers for end-to-end server tests: pytest-lsp clients that start the real `dg-lsp` over stdio, record every
workspace/applyEdit, dg/status and dg/draft, and answer applyEdit; document helpers; polling."""

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

ROOT = Path(__file__).resolve().parents[2]


def server_env() -> dict[str, str]:
    """Offline, CPU, and the checkout importable without `pip install -e .`."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p))
    return env


def server_command(model: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dg_lsp", "--model", str(model), *extra]


def make_client() -> LanguageClient:
    """pytest-lsp's client plus recorders for our edits and notifications."""
    client = make_test_lsp_client()
    client.applied_edits = []  # list[T.ApplyWorkspaceEditParams]
    client.statuses = []  # list[dict]
    client.drafts = []  # list[dict]
    client.apply_result = True

    @client.feature(T.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult:
        client.applied_edits.append(params)
        return T.ApplyWorkspaceEditResult(applied=client.apply_result)

    @client.feature("dg/status")
    def status(params: Any) -> None:
        client.statuses.append(as_dict(params))

    @client.feature("dg/draft")
    def draft(params: Any) -> None:
        client.drafts.append(as_dict(params))

    return client


def as_dict(params: Any) -> dict:
    """pygls hands custom-notification params over as a namedtuple-like object; tests want plain dicts."""
    if isinstance(params, dict):
        return params
    if hasattr(params, "_asdict"):
        return {k: as_dict(v) if hasattr(v, "_asdict") else v for k, v in params._asdict().items()}
    return dict(vars(params))


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


async def start_server(model: Path, init_options: dict | None = None, wait_ready: bool = True) -> LanguageClient:
    config = ClientServerConfig(server_command=server_command(model), client_factory=make_client,
                                server_env=server_env())
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


_versions: dict[str, int] = {}


def open_doc(client: LanguageClient, uri: str, text: str, language_id: str = "python") -> None:
    _versions[uri] = 1
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        T.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)))


def edit_doc(client: LanguageClient, uri: str, line: int, char: int, new_text: str,
             end: tuple[int, int] | None = None) -> int:
    """An incremental didChange replacing (line, char)..end with `new_text`; returns the new version."""
    _versions[uri] += 1
    el, ec = end if end is not None else (line, char)
    rng = T.Range(T.Position(line, char), T.Position(el, ec))
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=_versions[uri]),
        content_changes=[T.TextDocumentContentChangePartial(range=rng, text=new_text)]))
    return _versions[uri]


def version_of(uri: str) -> int:
    return _versions[uri]


def requests_done(client: LanguageClient, request_id: str) -> list[dict]:
    """dg/status bodies that report on request `request_id` (after the engine or cache answered)."""
    return [s["request"] for s in client.statuses if s.get("request") and s["request"].get("id") == request_id]
