"""The LSP edge: thin handlers that run snapshot -> context -> canvas -> engine -> edits.

State (documents, settings, caches) changes only on the event loop. Engine work goes to `Worker`'s thread
against an immutable `Snapshot`; before anything is returned or applied, the document's version is checked
again and a result for an older version is dropped. docs/PROTOCOL.md is the contract this file implements.

Requests are read against the document as it was when they ARRIVED. pygls starts an `async` handler as a task,
which runs only after the messages already read have been handled: a request followed by a didChange in one read
would otherwise see the changed document and apply version-1 positions to version 2. So the request handlers are
generators: pygls runs a generator handler at once, in arrival order with the didChange notifications, up to its
first `yield`; they take the snapshot there (`receive`) and yield the async work, which pygls then runs as a task
and whose result the generator returns. A result is then computed against that snapshot and dropped ("document
changed") if the document has moved on before it is sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from dg_lsp import debug
from dg_lsp.cache import LRU, MemoEncoder, Shown, fill_key, typed_ahead
from dg_lsp.canvas import build_request
from dg_lsp.commands import FILL_HOLE, REWRITE_SELECTION, code_actions, command
from dg_lsp.config import Settings, parse_settings
from dg_lsp.context import Hole, hole_at_cursor
from dg_lsp.documents import DocumentStore, Snapshot
from dg_lsp.edits import lsp_completion_item, lsp_inline_item, postprocess, to_lsp_range
from dg_lsp.protocol import DgProtocol
from dg_lsp.stdio import serve_stdio
from dg_lsp.syntax import COMMAND_PARSE_BYTES, KEYSTROKE_PARSE_BYTES, prepare_check
from dg_lsp.worker import SEED, EngineJob, Worker, load_engine, new_cancel_token

log = logging.getLogger(__name__)


def server_version() -> str:
    try:
        return importlib.metadata.version("dg-lsp")
    except importlib.metadata.PackageNotFoundError:  # running from a checkout that was not pip-installed
        return "0.1.0+checkout"


STATUS = "dg/status"
DRAFT = "dg/draft"
# The background reparse (`catch_up`): slices of 1 ms, 1 ms apart, while idle (no fill running, no message in
# or answer out for 3 ms). Keystrokes never wait for it (`keystroke_snapshot`).
PARSE_SLICE_S, PARSE_IDLE_S = 0.001, 0.003
OPEN_PARSE_S = 0.05  # didOpen parses this long on the loop; a bigger file finishes in the background
COMMAND_PARSE_S = 2.0  # a command waits this long (in slices, the loop serving meanwhile) for a fresh tree
BUSY_AFTER_S = 0.1  # dg/status "busy" once an engine job has run this long
CHECK_FILL_S = 60.0  # the check fill at load (one short canvas) must finish within this




@dataclass(frozen=True)
class Arrival:
    """When the keystroke behind a request reached the server: `at`, the arrival of its didChange (else of the
    request itself), and `wait_s`, how long the server then sat idle, its didChange handled, until the request
    came (the client's time, not the server's)."""

    at: float
    wait_s: float = 0.0
    handler_at: float = 0.0  # when the request's handler started


@dataclass(frozen=True)
class Received:
    """A request as it arrived, in order with the didChanges around it: its document then (None: not open) and
    its timing."""

    snap: Snapshot | None
    since: Arrival


@dataclass
class Outcome:
    """What one pass through the pipeline produced: a fill, or the reason there is none, and its figures."""

    fill: str | None
    reason: str | None
    stats: dict[str, Any] = field(default_factory=dict)


class DgServer(LanguageServer):
    def __init__(self, engine_factory: Callable[[Settings], Any] = load_engine,
                 token_factory: Callable[[], Any] = new_cancel_token,
                 default_model: str | None = None) -> None:
        super().__init__("dg-lsp", server_version(), protocol_cls=DgProtocol,
                         text_document_sync_kind=T.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.default_model = default_model  # `--model`: used while the client's modelPath is null
        self.store = DocumentStore()
        self.worker = Worker(engine_factory, token_factory)
        self.worker.on_state_change = lambda message: self.send_status(message=message)  # a remote backend's server
        self.fills: LRU[str] = LRU(256)
        self.shown: dict[str, Shown] = {}
        self.last_latency_ms: float | None = None
        self._ids = itertools.count(1)
        self._load_task: asyncio.Task | None = None
        self._encoder: tuple[Any, MemoEncoder] | None = None
        self._catch_ups: dict[str, asyncio.Task] = {}
        self._in_flight = 0  # fills running (past their debounce)
        self._active_at = 0.0  # when a fill last finished or an answer was last written (see `_catch_up`)
        self._change_at: dict[str, tuple[float, float]] = {}  # uri -> (arrival, end) of its latest didChange
        self._after_response: dict[str, tuple[dict[str, Any], Arrival | None]] = {}  # request id -> dg/status body
        self._running: dict[str, asyncio.Task | None] = {}  # request id -> its task (None until it starts)

    # -- small helpers (all on the loop) -----------------------------------------------------------------

    @property
    def encoding(self) -> str:
        enc = getattr(self.protocol, "server_capabilities", None)
        enc = enc.position_encoding if enc is not None else None
        return str(getattr(enc, "value", enc) or "utf-16")

    def request_id(self) -> str:
        """The JSON-RPC id of the request being handled (pygls keeps it in a context variable)."""
        msg_id = self.protocol.msg_id
        return str(msg_id) if msg_id is not None else f"dg-{next(self._ids)}"

    def doc_version(self, uri: str) -> int | None:
        doc = self.store.get(uri)
        return None if doc is None else doc.version

    def offset(self, snap: Snapshot, pos: T.Position) -> int | None:
        """Offset of `pos`, or None when its line is past the last one (a character past a line's end means
        the line's end, as LSP says)."""
        return None if pos.line >= len(snap.starts) else snap.offset_at(pos.line, pos.character, self.encoding)

    def state(self) -> str:
        if not self.settings.enabled:
            return "disabled"
        return self.worker.state

    def send_status(self, state: str | None = None, message: str = "", request: dict | None = None) -> None:
        body: dict[str, Any] = {"state": state or self.state(), "message": message,
                                "model": self.worker.model_name, "lastLatencyMs": self.last_latency_ms}
        if request is not None:
            body["request"] = request
        self.protocol.notify(STATUS, body)

    def status_after_response(self, request: dict[str, Any], since: Arrival | None) -> None:
        """Send this request's dg/status once its answer is written (`after_response`), with the server's own
        time from `since` (the arrival of the keystroke's didChange, else of the request) to that write."""
        self._after_response[request["id"]] = (request, since)
        while len(self._after_response) > 64:  # a request pygls never answered must not pile up
            self._after_response.pop(next(iter(self._after_response)))

    def after_response(self, msg_id: str) -> None:
        self._active_at = time.perf_counter()  # the client's next message is likely close: not idle yet
        pending = self._after_response.pop(msg_id, None)
        if pending is not None:
            request, since = pending
            if since is not None:
                now = time.perf_counter()
                out = getattr(self.protocol.writer, "handed_at", 0.0) or now  # see dg_lsp.stdio.TimedWriter
                request["respondedMs"] = round((out - since.at) * 1e3, 3)
                request["waitMs"] = round(since.wait_s * 1e3, 3)
                request["writeMs"] = round((now - out) * 1e3, 3)
                marks = request.pop("_marks", None)
                if marks is not None:
                    request["stagesMs"] = _stages(since, marks, out, request.get("engineMs", 0.0))
            self.send_status(request=request)

    def warn(self, message: str) -> None:
        log.warning("%s", message)
        self.window_show_message(T.ShowMessageParams(type=T.MessageType.Warning, message=message))

    def start_io(self, stdin: Any = None, stdout: Any = None) -> None:
        serve_stdio(self, stdin, stdout)  # the loop reads stdin (pygls reads it through a thread pool)

    def report_server_error(self, error: Exception, source: Any) -> None:
        if isinstance(self.protocol, DgProtocol) and self.protocol.send_parse_error(error):
            return
        super().report_server_error(error, source)

    def on_cancel_request(self, request_id: str) -> None:
        if self.worker.cancel_request(request_id):
            log.info("request %s cancelled: engine job cancelled", request_id)
        if request_id in self._running:  # its task stops at its next await (or never starts)
            task = self._running.pop(request_id)
            if task is not None:
                task.cancel()

    # -- arrival: the state a request's positions refer to -----------------------------------------------------

    def receive(self, uri: str, positions: Sequence[T.Position] = (), what: str = "request") -> Received:
        """Run where the request arrives (see the module docstring): its document's snapshot now, before any
        later didChange, and the timing of the keystroke behind it. Positions on a line past the document's end
        are Invalid Params (a character past its line's end means the line's end, as LSP says)."""
        snap = self.store.snapshot(uri, 0.0)
        for pos in positions if snap is not None else ():
            if pos.line >= len(snap.starts):
                raise JsonRpcInvalidParams(f"{what}: position is outside the document (line {pos.line}; version "
                                           f"{snap.version} has {len(snap.starts)} lines)")
        since = self.arrival(uri)
        self._running[self.request_id()] = None
        return Received(snap, since)

    def started(self) -> bool:
        """Called first in a request's task: False when the request was cancelled before its task started."""
        request_id = self.request_id()
        if request_id not in self._running:
            return False
        self._running[request_id] = asyncio.current_task()
        return True

    def finished(self) -> None:
        self._running.pop(self.request_id(), None)

    def moved_on(self, snap: Snapshot) -> bool:
        """Has the document changed (or closed) since `snap` was taken?"""
        return self.doc_version(snap.uri) != snap.version

    async def fresh_snapshot(self, snap: Snapshot) -> Snapshot:
        """`snap` with its tree reparsed, for a command: the reparse runs in slices, the loop serving in between,
        for at most COMMAND_PARSE_S; if the document changes meanwhile, or the time runs out, `snap` as it is."""
        deadline = time.perf_counter() + COMMAND_PARSE_S
        while not snap.tree_fresh and time.perf_counter() < deadline:
            doc = self.store.get(snap.uri)
            if doc is None or doc.version != snap.version:
                return snap
            if doc.parse(5 * PARSE_SLICE_S):
                return doc.snapshot(0.0)
            await asyncio.sleep(0)
        return snap

    # -- settings and model ------------------------------------------------------------------------------

    def apply_settings(self, raw: Any) -> None:
        new, errors = parse_settings(raw, self.settings)
        for e in errors:
            self.warn(e)
        old, self.settings = self.settings, new
        if self._load_task is not None and new.engine_key() != old.engine_key():
            self.start_loading()
        elif new.enabled != old.enabled:
            self.send_status()

    def on_initialized(self) -> None:
        """The first `initialized` loads the model; a repeated one is logged and ignored (no reload)."""
        if self._load_task is not None:
            log.warning("initialized received again: the model is already %s", self.worker.state)
            return
        self.start_loading()

    def start_loading(self) -> None:
        self.fills.clear()
        self.shown.clear()
        self._load_task = asyncio.ensure_future(self._load())

    async def _load(self) -> None:
        token = f"dg-lsp/load/{next(self._ids)}"
        caps = self.client_capabilities.window
        progress = bool(caps and caps.work_done_progress)
        if progress:
            try:
                await self.work_done_progress.create_async(token)
            except Exception:  # the client refused: load without a progress bar
                progress = False
        settings = self.settings
        if settings.model_path is None and self.default_model is not None:
            settings = dataclasses.replace(settings, model_path=self.default_model)
        where = settings.model_path or "the default model"
        if progress:
            self.work_done_progress.begin(token, T.WorkDoneProgressBegin(
                title="dg-lsp: loading model", message=where, cancellable=False))
        self.send_status("loading", f"loading {where}")
        await self.worker.load(settings)
        if progress:
            self.work_done_progress.end(token, T.WorkDoneProgressEnd(message=self.worker.state))
        if self.worker.state == "error":
            msg = f"dg-lsp: could not load {where}: {self.worker.error}"
            self.window_show_message(T.ShowMessageParams(type=T.MessageType.Error, message=msg))
            self.send_status("error", msg)
        elif self.worker.state == "ready":
            self.send_status("ready", f"model {self.worker.model_name} ready")

    # -- the pipeline ------------------------------------------------------------------------------------

    def encoder(self, engine: Any) -> MemoEncoder:
        """The engine's tokenizer behind a memo, one per loaded model."""
        if self._encoder is None or self._encoder[0] is not engine:
            split = bool(getattr(engine, "splits_before_newline", False))
            self._encoder = (engine, MemoEncoder(engine.encode, split_before_newline=split))
        return self._encoder[1]

    def cache_key(self, req: Any) -> tuple:
        s = self.settings
        key = fill_key(req.context_ids, req.canvas_length, s.steps, s.entropy_bound, SEED, req.max_canvases)
        return (self.worker.generation, key)

    def not_ready(self) -> str | None:
        if self.worker.state != "ready" or self.worker.engine is None:
            return f"model not ready ({self.worker.state})"
        return None

    async def fill(self, snap: Snapshot, hole: Hole, request_id: str, kind: str,
                   progress_token: T.ProgressToken | None = None, since: Arrival | None = None) -> Outcome:
        """context -> canvas -> engine (or cache) -> postprocess, for one snapshot. Sends dg/status after (for
        an inline/completion request, `since` given: after its answer)."""
        self._in_flight += 1
        try:
            return await self._fill(snap, hole, request_id, kind, progress_token, since)
        finally:
            self._in_flight -= 1
            # its answer is about to be written: a reparse slice now would sit on the keystroke's path
            self._active_at = time.perf_counter()

    async def _fill(self, snap: Snapshot, hole: Hole, request_id: str, kind: str,
                    progress_token: T.ProgressToken | None, since: Arrival | None) -> Outcome:
        t0 = time.perf_counter()
        marks = {"fill": t0}  # perf_counter() times of the stages (see `_stages`)
        s, engine = self.settings, self.worker.engine
        fmt = engine.infill_format
        req = build_request(snap, hole, self.encoder(engine), fmt, fmt.context_budget(s.context_tokens))
        marks["canvas"] = time.perf_counter()
        canvas_ms = (marks["canvas"] - t0) * 1e3
        key = self.cache_key(req)
        stats: dict[str, Any] = {"id": request_id, "uri": snap.uri, "version": snap.version, "cached": False,
                                 "treeFresh": snap.tree_fresh,
                                 "steps": 0, "cancelled": False, "stepsAfterCancel": None,
                                 "reusedPrefixTokens": 0, "engineMs": 0.0,
                                 "contextTokens": len(req.context_ids), "canvasLength": req.canvas_length,
                                 "canvasMs": round(canvas_ms, 3)}
        reason = None
        # The syntax check's baseline (the window around the hole parsed as it is) does not depend on the fill: the
        # loop, idle while the engine runs, prepares it after the engine's first step. Not before the engine starts
        # (it would sit on the keystroke's path) nor in another thread (tree-sitter holds the GIL while it parses, so
        # the engine thread would wait for it to start).
        baseline: list[Any] = []
        engine_done: list[bool] = []

        def prepare() -> None:
            if not baseline and not engine_done and self.doc_version(snap.uri) == snap.version:
                try:
                    baseline.append(prepare_check(snap, hole))
                except Exception:  # noqa: BLE001 -- postprocess then builds the check itself
                    log.exception("syntax check baseline failed")
                    baseline.append(None)

        raw = self.fills.get(key)
        if raw is not None:
            stats["cached"] = "lru"
        else:
            try:
                raw, reason = await self._run_engine(snap, hole, req, key, request_id, kind, progress_token, stats,
                                                     prepare, marks)
            finally:
                engine_done.append(True)
        fill = None
        if reason is None and self.doc_version(snap.uri) == snap.version:
            t_post = time.perf_counter()
            stats["checkPrepared"] = bool(baseline)
            prepared = baseline[0] if baseline else None
            # bounded (a window of the hole's neighbourhood, a parse budget), so it runs on the loop: no thread hop
            budget = KEYSTROKE_PARSE_BYTES if kind == "inline" else COMMAND_PARSE_BYTES
            fill = postprocess(snap, hole, raw, prepared, budget)
            marks["post"] = time.perf_counter()
            stats["postMs"] = round((marks["post"] - t_post) * 1e3, 3)
            if not fill:
                fill, reason = None, "empty fill"
        if self.doc_version(snap.uri) != snap.version:  # also explains a cancel caused by a keystroke
            fill, reason = None, "document changed"
        total = (time.perf_counter() - t0) * 1e3
        stats["totalMs"] = round(total, 3)
        stats["serverMs"] = round(total - stats["engineMs"], 3)
        stats["reason"] = reason
        self.last_latency_ms = round(total, 1)
        log.info("fill %s %s v%s: %s", request_id, snap.uri, snap.version, stats)
        if since is not None:
            marks["filled"] = time.perf_counter()
            stats["_marks"] = marks
            self.status_after_response(stats, since)
        else:
            self.send_status(request=stats)
        return Outcome(fill, reason, stats)

    async def _run_engine(self, snap: Snapshot, hole: Hole, req: Any, key: tuple, request_id: str, kind: str,
                          progress_token: T.ProgressToken | None, stats: dict,
                          first_step: Callable[[], None], marks: dict[str, float]) -> tuple[str, str | None]:
        """Run the engine job; `first_step` is called on the loop once the engine has done its first step.
        `marks` gets the times the engine thread started and finished the job and the loop resumed."""
        s = self.settings
        ticket = self.worker.ticket(snap.uri, request_id, kind)
        on_step = self._step_listener(snap, hole, request_id, progress_token, first_step)
        job = EngineJob(list(req.context_ids), req.canvas_length, s.steps, s.entropy_bound, req.max_canvases,
                        on_step=on_step, draft_text=s.drafts)
        # "busy" only for a job that takes a while: a keystroke's fill would make the status flicker, and the write
        # would sit on its path
        busy = asyncio.get_running_loop().call_later(BUSY_AFTER_S, self.send_status, "busy")
        try:
            t_engine = time.perf_counter()
            res = await self.worker.infill(ticket, job)
            marks["resumed"] = time.perf_counter()
            stats["engineWallMs"] = round((marks["resumed"] - t_engine) * 1e3, 3)  # engineMs + hand-offs
            if ticket.started_at is not None and ticket.finished_at is not None:
                marks["started"], marks["finished"] = ticket.started_at, ticket.finished_at
        except asyncio.CancelledError:  # $/cancelRequest on an inline request: no answer, but the figures
            _job_stats(stats, ticket, None)
            self.send_status(request=dict(stats, reason="cancelled"))
            raise
        finally:
            busy.cancel()
            self.worker.release(ticket)
        _job_stats(stats, ticket, res)
        if res is None or res.cancelled:
            return "", "cancelled"
        self.fills.put(key, res.text)  # the key of the settings the job ran with
        if self.settings.drafts:
            rng = to_lsp_range(snap, hole.start, hole.end, self.encoding)
            body = _draft_body(snap, request_id, rng, res.steps, res.steps, res.text, True)
            self.protocol.notify(DRAFT, body)
        return res.text, None

    def _step_listener(self, snap, hole, request_id, progress_token, first_step):
        """A callback for the engine thread: `first_step` after the first step, and each step as dg/draft and/or
        $/progress."""
        drafts = self.settings.drafts
        loop = asyncio.get_running_loop()
        notify = self.protocol.notify
        rng = to_lsp_range(snap, hole.start, hole.end, self.encoding) if drafts else None

        def on_step(draft: Any) -> None:  # engine thread: only hands work to the loop
            if draft.step == 1:
                loop.call_soon_threadsafe(first_step)
            if drafts:
                body = _draft_body(snap, request_id, rng, draft.step, draft.steps, draft.text, False)
                loop.call_soon_threadsafe(notify, DRAFT, body)
            if progress_token is not None:
                pct = min(100, int(100 * draft.step / max(draft.steps, 1)))
                report = T.WorkDoneProgressReport(message=f"step {draft.step}/{draft.steps}", percentage=pct)
                loop.call_soon_threadsafe(self.work_done_progress.report, progress_token, report)

        return on_step

    # -- requests ----------------------------------------------------------------------------------------

    def keystroke_snapshot(self, uri: str) -> Snapshot | None:
        """A snapshot for a keystroke's request, without waiting for a reparse. The reparse a change needs runs
        in the background (`catch_up`) while the server is idle: during the debounce and between keystrokes.
        When it has not finished (keystrokes back to back, or a reparse that takes long: tree-sitter's error
        recovery after an unclosed quote can take tens of ms on a big file), the request uses the last tree with
        the edits applied (`Snapshot.tree_fresh` False): positions right, structure as of the last parse."""
        return self.store.snapshot(uri, 0.0)

    def catch_up(self, uri: str) -> None:
        """Start reparsing `uri` in the background (on the loop, in slices; a thread would compete with the loop
        for the CPU on small machines)."""
        if uri not in self._catch_ups:
            self._catch_ups[uri] = asyncio.ensure_future(self._catch_up(uri))

    async def _catch_up(self, uri: str) -> None:
        try:
            while (doc := self.store.get(uri)) is not None:
                await asyncio.sleep(PARSE_SLICE_S if not self._in_flight else 10 * PARSE_SLICE_S)  # messages first
                last = max(self.protocol.received_at, self._active_at)
                idle = not self._in_flight and time.perf_counter() - last > PARSE_IDLE_S
                if idle and (self.store.get(uri) is not doc or doc.parse(PARSE_SLICE_S)):
                    return
        finally:
            self._catch_ups.pop(uri, None)

    def usable(self, snap: Snapshot | None) -> Snapshot | None:
        """The snapshot to answer an inline/completion request from, or None (an empty answer)."""
        if snap is None or not self.settings.language_enabled(snap.language_id):
            return None
        if (why := self.not_ready()) is not None:
            self.send_status(message=why)
            return None
        if self.moved_on(snap):  # a didChange read after the request (in one batch): its positions are stale
            return None
        return snap

    def arrival(self, uri: str) -> Arrival:
        """When the keystroke behind this request arrived: the first request after a didChange is timed from
        that didChange, any other from its own arrival."""
        got, now = self.protocol.received_at, time.perf_counter()
        change = self._change_at.pop(uri, None)
        if change is None:
            return Arrival(got, 0.0, now)
        arrived, handled = change
        return Arrival(arrived, max(0.0, got - handled), now)

    async def inline(self, params: T.InlineCompletionParams, seen: Received) -> dict | None:
        """An InlineCompletionList (as JSON, see `inline_list`) with one item, or None."""
        if not self.started():
            return None
        try:
            return await self._inline(params, seen)
        finally:
            self.finished()

    async def _inline(self, params: T.InlineCompletionParams, seen: Received) -> dict | None:
        since = dataclasses.replace(seen.since, handler_at=time.perf_counter())
        snap = self.usable(seen.snap)
        if snap is None:
            return None
        uri, cursor = snap.uri, self.offset(snap, params.position)
        if (shown := self.shown.get(uri)) is not None:
            rest = typed_ahead(shown, snap.text, cursor)
            if rest:  # "" means the whole fill was typed (or accepted): what comes next needs the engine
                return self._typed_ahead_item(snap, shown, cursor, rest, since)
        if not await self.worker.debounce(uri, self.settings.debounce_ms):
            return None  # a newer request for this document arrived: it answers instead
        if self.moved_on(snap) or self.not_ready():
            return None
        if not snap.tree_fresh:  # the same version (checked just above), its tree perhaps reparsed meanwhile
            snap = self.keystroke_snapshot(uri) or snap
        hole = hole_at_cursor(snap, cursor)
        out = await self.fill(snap, hole, self.request_id(), "inline", since=since)
        if out.fill is None:
            return None
        item = lsp_inline_item(snap, hole, cursor, out.fill, self.encoding)
        if item is None:
            return None
        if isinstance(item.insert_text, str) and item.range is not None:
            end = item.range.end
            self.shown[uri] = Shown(snap.text, cursor, item.insert_text, snap.offset_at(end.line, end.character,
                                                                                        self.encoding))
        return inline_list(item)

    def _typed_ahead_item(self, snap: Snapshot, shown: Shown, cursor: int, rest: str, since: Arrival):
        """The remainder of the fill already shown: no engine call, no debounce."""
        self.status_after_response({"id": self.request_id(), "uri": snap.uri, "version": snap.version,
                                    "cached": "typed-ahead", "steps": 0, "engineMs": 0.0}, since)
        end = shown.end + (cursor - shown.cursor)
        rng = to_lsp_range(snap, cursor, end, self.encoding)
        return inline_list(T.InlineCompletionItem(insert_text=rest, range=rng))

    async def completion(self, params: T.CompletionParams, seen: Received) -> T.CompletionList | None:
        if not self.started():
            return None
        try:
            since = dataclasses.replace(seen.since, handler_at=time.perf_counter())
            snap = self.usable(seen.snap)
            if snap is None:
                return None
            cursor = self.offset(snap, params.position)
            hole = hole_at_cursor(snap, cursor)
            out = await self.fill(snap, hole, self.request_id(), "inline", since=since)
            if out.fill is None:
                return None
            item = lsp_completion_item(snap, hole, cursor, out.fill, self.encoding)
            return T.CompletionList(is_incomplete=True, items=[item] if item is not None else [])
        finally:
            self.finished()


def _draft_body(snap: Snapshot, request_id: str, rng: T.Range, step: int, steps: int, text: str,
                done: bool) -> dict[str, Any]:
    """A dg/draft notification's params (`rng`: the hole)."""
    return {"uri": snap.uri, "version": snap.version, "requestId": request_id, "step": step, "steps": steps,
            "text": text, "range": rng, "done": done}


def inline_list(item: T.InlineCompletionItem) -> dict[str, Any]:
    """An InlineCompletionList of `item` as JSON, written as it is (see DgProtocol._send_response): the keystroke's
    answer skips pygls' generic serializer."""
    r = item.range
    out: dict[str, Any] = {"insertText": item.insert_text}
    if r is not None:
        out["range"] = {"start": {"line": r.start.line, "character": r.start.character},
                        "end": {"line": r.end.line, "character": r.end.character}}
    return {"items": [out]}


def _stages(since: Arrival, marks: dict[str, float], out: float, engine_ms: float) -> dict[str, float]:
    """Where a keystroke's server time went (ms): `input` (its didChange handled, the request read, parsed and
    dispatched; the idle wait for the request left out), `hole` (snapshot, cursor, typed-ahead check, debounce,
    hole), `canvas`, `toEngine` (to the engine thread's start), `engineGlue` (the engine thread's time outside the
    engine's own timer), `fromEngine` (back to the loop), `post` (post-processing with the syntax check), `answer`
    (the item built, serialized and handed to the OS). Stages the request did not go through are absent."""
    def ms(a: float, b: float) -> float:
        return round((b - a) * 1e3, 3)

    handler = since.handler_at or marks["fill"]
    out_stages = {"input": round(ms(since.at, handler) - since.wait_s * 1e3, 3),
                  "hole": ms(handler, marks["fill"]),
                  "canvas": ms(marks["fill"], marks["canvas"])}
    if "started" in marks:
        out_stages["toEngine"] = ms(marks["canvas"], marks["started"])
        out_stages["engineGlue"] = round(ms(marks["started"], marks["finished"]) - engine_ms, 3)
        out_stages["fromEngine"] = ms(marks["finished"], marks["resumed"])
    if "post" in marks:
        out_stages["post"] = ms(marks.get("resumed", marks["canvas"]), marks["post"])
    out_stages["answer"] = ms(marks.get("post", marks["filled"]), out)
    return out_stages


def _job_stats(stats: dict[str, Any], ticket: Any, res: Any) -> None:
    """Fill the dg/status figures of one engine job from its ticket and result (None when it did not finish)."""
    stats["steps"] = res.steps if res is not None else ticket.steps_done
    stats["cancelled"] = ticket.steps_at_cancel is not None
    stats["stepsAfterCancel"] = ticket.steps_after_cancel
    if res is not None:
        stats["reusedPrefixTokens"] = res.reused_prefix_tokens
        stats["engineMs"] = round(float(res.timings.get("total_ms", 0.0)), 3)
    if ticket.steps_at_cancel is not None:
        log.info("request %s cancelled (%s) after step %d; %d step(s) ran after the cancel",
                 ticket.request_id, ticket.why_cancelled, ticket.steps_at_cancel, ticket.steps_after_cancel)


def build_server(engine_factory: Callable[[Settings], Any] = load_engine,
                 token_factory: Callable[[], Any] = new_cancel_token,
                 default_model: str | None = None) -> DgServer:
    """A server with every handler registered. The factories are seams for unit tests and benchmarks."""
    server = DgServer(engine_factory, token_factory, default_model)

    @server.feature(T.INITIALIZE)
    def initialize(ls: DgServer, params: T.InitializeParams) -> None:
        ls.apply_settings(params.initialization_options)

    @server.feature(T.INITIALIZED)
    def initialized(ls: DgServer, params: T.InitializedParams) -> None:
        ls.on_initialized()

    @server.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: DgServer, params: T.DidChangeConfigurationParams) -> None:
        ls.apply_settings(params.settings)

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DgServer, params: T.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        ls.worker.cancel_document(d.uri, "reopened")
        ls.shown.pop(d.uri, None)
        doc = ls.store.open(d.uri, d.language_id, d.version, d.text, OPEN_PARSE_S)
        if not doc.tree_fresh:
            ls.catch_up(d.uri)  # a big file: the first parse finishes in slices while the server is idle

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DgServer, params: T.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        arrived = ls.protocol.received_at
        ls._change_at.pop(uri, None)
        ls.worker.cancel_document(uri, "newer edit")  # a keystroke stops the engine within one step
        if uri not in ls.store:
            log.warning("didChange for a document that is not open: %s", uri)
            return
        ls.store.change(uri, params.text_document.version, params.content_changes, ls.encoding)
        ls.catch_up(uri)  # the reparse, in slices, while no fill runs
        ls._change_at[uri] = (arrived, time.perf_counter())

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DgServer, params: T.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.worker.cancel_document(uri, "closed")
        ls._change_at.pop(uri, None)
        ls.shown.pop(uri, None)
        ls.store.close(uri)

    # Request handlers are generators: the part before `yield` runs where the request arrives (see the module
    # docstring); pygls runs the yielded coroutine as a task and the generator returns its result.
    @server.feature(T.TEXT_DOCUMENT_INLINE_COMPLETION, T.InlineCompletionOptions())
    def inline_completion(ls: DgServer, params: T.InlineCompletionParams):
        seen = ls.receive(params.text_document.uri, [params.position], T.TEXT_DOCUMENT_INLINE_COMPLETION)
        return (yield ls.inline, (params, seen), None)

    @server.feature(T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions())
    def completion(ls: DgServer, params: T.CompletionParams):
        seen = ls.receive(params.text_document.uri, [params.position], T.TEXT_DOCUMENT_COMPLETION)
        return (yield ls.completion, (params, seen), None)

    @server.feature(T.TEXT_DOCUMENT_CODE_ACTION,
                    T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.RefactorRewrite]))
    def code_action(ls: DgServer, params: T.CodeActionParams):
        return code_actions(ls, params)

    server.command(FILL_HOLE)(command)
    server.command(REWRITE_SELECTION)(command)

    @server.feature(T.SHUTDOWN)
    def shutdown(ls: DgServer, params: None) -> None:
        ls.worker.shutdown()

    debug.register(server)
    return server
