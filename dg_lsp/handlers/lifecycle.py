"""Lifecycle: initialize (settings, the position encoding, the capabilities), initialized (loads the model, once),
didChangeConfiguration (may reload), shutdown. Runs on the event loop; the model loads on the engine thread
(dg_lsp.fill.worker). The dispatcher (dg_lsp.wire.dispatch) gates the order of these messages. The session services
these use are `LifecycleSession` (dg_lsp.handlers.services)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

from lsprotocol import types as T

from dg_lsp.config import Settings, parse_settings
from dg_lsp.context.index import EXTENSIONS
from dg_lsp.context.workspace import uri_path
from dg_lsp.handlers.services import LifecycleSession
from dg_lsp.session import server_version
from dg_lsp.wire.dispatch import Dispatcher

log = logging.getLogger(__name__)


def register(dispatch: Dispatcher, ls: LifecycleSession) -> None:
    told: set[str] = set()  # the last configuration's messages (apply_settings)

    def initialize(params: T.InitializeParams) -> T.InitializeResult:
        ls.client.capabilities = params.capabilities
        encoding, capabilities = dispatch.capabilities(params.capabilities, ls.experimental)
        ls.encoding = encoding  # type: ignore[assignment]  # one of dg_lsp.wire.capabilities.ENCODINGS
        folders = [f.uri for f in params.workspace_folders or ()] or ([params.root_uri] if params.root_uri else [])
        ls.roots = [p for p in map(uri_path, folders) if p is not None]
        apply_settings(ls, params.initialization_options, told)
        return T.InitializeResult(capabilities=capabilities,
                                  server_info=T.ServerInfo(name="dg-lsp", version=server_version()))

    def initialized(params: T.InitializedParams) -> None:
        if ls.load_task is not None:  # a repeated `initialized` must not reload the model
            log.warning("initialized received again: the model is already %s", ls.worker.state)
            return
        start_loading(ls)
        start_index(ls)
        watch_files(ls)

    def shutdown(params: None) -> None:
        ls.cross_file.stop()
        ls.worker.shutdown()

    dispatch.request(T.INITIALIZE, initialize)
    dispatch.notification(T.INITIALIZED, initialized)
    dispatch.notification(T.WORKSPACE_DID_CHANGE_CONFIGURATION, lambda params: apply_settings(ls, params.settings,
                                                                                                   told))
    dispatch.request(T.SHUTDOWN, shutdown)
    dispatch.notification(T.WORKSPACE_DID_CHANGE_WATCHED_FILES, lambda params: ls.cross_file.files_changed(
        [(c.uri, int(c.type)) for c in params.changes]))


def start_index(ls: LifecycleSession) -> None:
    """(Re)build the workspace index in the background, or drop it when context from other files is off."""
    s = ls.settings
    if s.cross_file_budget() <= 0 or not s.enabled or s.index_max_files == 0:  # no folders: open documents only
        ls.cross_file.stop()
        return
    ls.cross_file.start([Path(r) for r in ls.roots], s.index_max_files, s.index_max_file_bytes, ls.idle_wait)


def watch_files(ls: LifecycleSession) -> None:
    """Ask for workspace/didChangeWatchedFiles on source files, where the client can register it dynamically."""
    ws = ls.client.capabilities.workspace
    caps = ws.did_change_watched_files if ws is not None else None
    if caps is None or not caps.dynamic_registration or ls.cross_file.index is None:
        return
    exts = ",".join(sorted(e.lstrip(".") for e in EXTENSIONS))
    opts = T.DidChangeWatchedFilesRegistrationOptions(watchers=[T.FileSystemWatcher(glob_pattern=f"**/*.{{{exts}}}")])
    reg = T.Registration(id="dg-lsp/watched-files", method=T.WORKSPACE_DID_CHANGE_WATCHED_FILES, register_options=opts)

    async def register() -> None:
        try:
            await ls.client.register_capability(T.RegistrationParams(registrations=[reg]))
        except Exception:  # noqa: BLE001 -- the client refused: saves and closes still update the index
            log.info("client refused workspace/didChangeWatchedFiles")

    asyncio.ensure_future(register())


def apply_settings(ls: LifecycleSession, raw: Any, told: set[str] | None = None) -> None:
    """Merge client settings (a refused value: a warning, and the value in force stays); reload the model if its
    settings changed. `told`: the previous configuration's messages, not repeated (editors resend every key on each
    change, and a refused value is said once), replaced by this one's."""
    new, errors = parse_settings(raw, ls.settings)
    for e in errors:
        if told is None or e not in told:
            ls.warn(e)
    if told is not None:
        told.clear()
        told.update(errors)
    old, ls.settings = ls.settings, new
    if ls.load_task is not None and index_key(new) != index_key(old):
        start_index(ls)
    if ls.load_task is not None and new.engine_key() != old.engine_key():
        start_loading(ls)
    elif new.enabled != old.enabled:
        ls.send_status()


def index_key(s: Settings) -> tuple[bool, bool, int, int]:
    """The settings the workspace index is built from."""
    return s.cross_file_budget() > 0, s.enabled, s.index_max_files, s.index_max_file_bytes


def start_loading(ls: LifecycleSession) -> None:
    ls.caches.clear()
    ls.shown.clear()
    ls.load_task = asyncio.ensure_future(_load(ls))


async def _load(ls: LifecycleSession) -> None:
    """Load (or reload) the model with work-done progress when the client supports it, then say how it went."""
    token = f"dg-lsp/load/dg-{next(ls.loads)}"
    caps = ls.client.capabilities.window
    progress = bool(caps and caps.work_done_progress)
    if progress:
        try:
            await ls.client.progress_create(token)
        except Exception:  # noqa: BLE001 -- the client refused: load without a progress bar
            progress = False
    settings = ls.settings
    if settings.model_path is None and ls.default_model is not None:
        settings = dataclasses.replace(settings, model_path=ls.default_model)
    where = settings.model_path or "the default model"
    if progress:
        ls.client.progress(token, T.WorkDoneProgressBegin(title="dg-lsp: loading model", message=where,
                                                          cancellable=False))
    ls.send_status("loading", f"loading {where}")
    await ls.worker.load(settings)
    if progress:
        ls.client.progress(token, T.WorkDoneProgressEnd(message=ls.worker.state))
    if ls.worker.state == "error":
        msg = f"dg-lsp: could not load {where}: {ls.worker.error}"
        ls.client.show_message(T.MessageType.Error, msg)
        ls.send_status("error", msg)
    elif ls.worker.state == "ready":
        ls.send_status("ready", f"model {ls.worker.model_name} ready")
