"""A recording LSP client of dg-lsp, shared by the demo, the benchmarks and the tests, and the model picker they
share.

`record(client)` adds to a pygls client (pygls' own, or pytest-lsp's) what these callers need: every dg/status and
dg/draft (as plain dicts) and workspace/applyEdit, the open documents' versions, and helpers to open, edit and ask.
It starts no process: the caller does (pygls' `start_io`, pytest-lsp's `ClientServerConfig`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types as T
from pygls.client import JsonRPCClient

from dg_lsp.backends.checkpoint import default_model_dir

ApplyEdit = Callable[[T.ApplyWorkspaceEditParams], T.ApplyWorkspaceEditResult]


def pick_model(model: Path | None, fallback: Callable[[], tuple[Path, str]] | None = None) -> tuple[Path, str]:
    """(checkpoint dir, label): `model` when given, else the shipped default model, else `fallback()` (the
    benchmarks build a random checkpoint there); with neither, an error that says what to pass."""
    if model is not None:
        return model, f"checkpoint {model}"
    default = default_model_dir()
    if (default / "model.safetensors").is_file() and (default / "tokenizer.json").is_file():
        return default, "default model (trained)"
    if fallback is not None:
        return fallback()
    raise FileNotFoundError(f"no trained default model at {default}: pass --model DIR (a checkpoint directory)")


def as_dict(params: Any) -> Any:
    """pygls hands custom-notification params over as namedtuple-like objects; callers want plain dicts."""
    if isinstance(params, dict):
        return {k: as_dict(v) for k, v in params.items()}
    if hasattr(params, "_asdict"):
        return {k: as_dict(v) for k, v in params._asdict().items()}
    if isinstance(params, list):
        return [as_dict(v) for v in params]
    return params


def record(client: JsonRPCClient, apply: ApplyEdit | None = None,
           on_draft: Callable[[dict], None] | None = None) -> Any:
    """Add recorders to `client` and return it: `statuses` and `drafts` (dicts), `applied_edits` (every
    workspace/applyEdit; answered by `apply`, else with `client.apply_result`), `versions` (uri -> version)."""
    client.statuses = []
    client.drafts = []
    client.applied_edits = []
    client.apply_result = True
    client.versions = {}

    @client.feature("dg/status")
    def status(params: Any) -> None:
        client.statuses.append(as_dict(params))

    @client.feature("dg/draft")
    def draft(params: Any) -> None:
        body = as_dict(params)
        client.drafts.append(body)
        if on_draft is not None:
            on_draft(body)

    @client.feature(T.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult:
        client.applied_edits.append(params)
        return apply(params) if apply is not None else T.ApplyWorkspaceEditResult(applied=client.apply_result)

    return client


def open_doc(client: Any, uri: str, text: str, language_id: str = "python") -> None:
    client.versions[uri] = 1
    client.text_document_did_open(T.DidOpenTextDocumentParams(
        T.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)))


def edit_doc(client: Any, uri: str, line: int, char: int, new_text: str,
             end: tuple[int, int] | None = None) -> int:
    """An incremental didChange replacing (line, char)..end with `new_text`; returns the new version."""
    client.versions[uri] += 1
    rng = T.Range(T.Position(line, char), T.Position(*(end or (line, char))))
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=client.versions[uri]),
        content_changes=[T.TextDocumentContentChangePartial(range=rng, text=new_text)]))
    return client.versions[uri]


def configure(client: Any, **settings: Any) -> None:
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"dg": settings}))


def inline_params(uri: str, line: int, char: int, automatic: bool = True) -> T.InlineCompletionParams:
    kind = T.InlineCompletionTriggerKind.Automatic if automatic else T.InlineCompletionTriggerKind.Invoked
    return T.InlineCompletionParams(text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line, char),
                                    context=T.InlineCompletionContext(trigger_kind=kind))


def request_stats(client: Any, request_id: str) -> dict | None:
    """The figures dg/status reported for request `request_id` (the last such status), or None yet."""
    for s in reversed(client.statuses):
        req = s.get("request")
        if req is not None and req.get("id") == request_id:
            return req
    return None
