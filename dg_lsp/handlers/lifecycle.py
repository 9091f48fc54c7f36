"""Lifecycle: initialize (settings), initialized (loads the model, once), didChangeConfiguration (may reload),
shutdown. Runs on the event loop; the model loads on the engine thread (dg_lsp.worker)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from lsprotocol import types as T

from dg_lsp.config import parse_settings
from dg_lsp.session import DgServer

log = logging.getLogger(__name__)


def register(server: DgServer) -> None:
    @server.feature(T.INITIALIZE)
    def initialize(ls: DgServer, params: T.InitializeParams) -> None:
        apply_settings(ls, params.initialization_options)

    @server.feature(T.INITIALIZED)
    def initialized(ls: DgServer, params: T.InitializedParams) -> None:
        if ls.load_task is not None:  # a repeated `initialized` must not reload the model
            log.warning("initialized received again: the model is already %s", ls.worker.state)
            return
        start_loading(ls)

    @server.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: DgServer, params: T.DidChangeConfigurationParams) -> None:
        apply_settings(ls, params.settings)

    @server.feature(T.SHUTDOWN)
    def shutdown(ls: DgServer, params: None) -> None:
        ls.worker.shutdown()


def apply_settings(ls: DgServer, raw: Any) -> None:
    """Merge client settings (a bad key: a warning and its default); reload the model if its settings changed."""
    new, errors = parse_settings(raw, ls.settings)
    for e in errors:
        ls.warn(e)
    old, ls.settings = ls.settings, new
    if ls.load_task is not None and new.engine_key() != old.engine_key():
        start_loading(ls)
    elif new.enabled != old.enabled:
        ls.send_status()


def start_loading(ls: DgServer) -> None:
    ls.caches.clear()
    ls.shown.clear()
    ls.load_task = asyncio.ensure_future(_load(ls))


async def _load(ls: DgServer) -> None:
    """Load (or reload) the model with work-done progress when the client supports it, then say how it went."""
    token = f"dg-lsp/load/{ls.request_id()}"
    caps = ls.client_capabilities.window
    progress = bool(caps and caps.work_done_progress)
    if progress:
        try:
            await ls.work_done_progress.create_async(token)
        except Exception:  # noqa: BLE001 -- the client refused: load without a progress bar
            progress = False
    settings = ls.settings
    if settings.model_path is None and ls.default_model is not None:
        settings = dataclasses.replace(settings, model_path=ls.default_model)
    where = settings.model_path or "the default model"
    if progress:
        ls.work_done_progress.begin(token, T.WorkDoneProgressBegin(
            title="dg-lsp: loading model", message=where, cancellable=False))
    ls.send_status("loading", f"loading {where}")
    await ls.worker.load(settings)
    if progress:
        ls.work_done_progress.end(token, T.WorkDoneProgressEnd(message=ls.worker.state))
    if ls.worker.state == "error":
        msg = f"dg-lsp: could not load {where}: {ls.worker.error}"
        ls.window_show_message(T.ShowMessageParams(type=T.MessageType.Error, message=msg))
        ls.send_status("error", msg)
    elif ls.worker.state == "ready":
        ls.send_status("ready", f"model {ls.worker.model_name} ready")
