"""The LSP edge: thin handlers that run snapshot -> context -> canvas -> engine -> edits.

State (documents, settings, caches) changes only on the event loop. Engine work goes to `Worker`'s thread
against an immutable `Snapshot`; before anything is returned or applied, the document's version is checked
again and a result for an older version is dropped. docs/PROTOCOL.md is the contract this file implements.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer

from dg_lsp import debug
from dg_lsp.cache import LRU, MemoEncoder, Shown, fill_key, typed_ahead
from dg_lsp.canvas import build_request
from dg_lsp.commands import FILL_HOLE, REWRITE_SELECTION, code_actions, run_command
from dg_lsp.config import Settings, parse_settings
from dg_lsp.context import Hole, hole_at_cursor
from dg_lsp.documents import DocumentStore, Snapshot
from dg_lsp.edits import (
    COMMAND_VALIDATE_BUDGET_S,
    VALIDATE_BUDGET_S,
    lsp_completion_item,
    lsp_inline_item,
    postprocess,
    prepare_check,
    to_lsp_range,
)
from dg_lsp.protocol import DgProtocol
from dg_lsp.stdio import serve_stdio
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
BUSY_AFTER_S = 0.1  # dg/status "busy" once an engine job has run this long


@dataclass(frozen=True)
class Arrival:
    """When the keystroke behind a request reached the server: `at`, the arrival of its didChange (else of the
    request itself), and `wait_s`, how long the server then sat idle, its didChange handled, until the request
    came (the client's time, not the server's)."""

    at: float
    wait_s: float = 0.0
    handler_at: float = 0.0  # when the request's handler started


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
            # bounded (edits.VALIDATE_BUDGET_S), so it runs on the loop: no thread hop on the keystroke path
            budget = VALIDATE_BUDGET_S if kind == "inline" else COMMAND_VALIDATE_BUDGET_S
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

    def usable(self, uri: str) -> Snapshot | None:
        """The snapshot to answer an inline/completion request from, or None (an empty answer)."""
        snap = self.keystroke_snapshot(uri)
        if snap is None or not self.settings.language_enabled(snap.language_id):
            return None
        if (why := self.not_ready()) is not None:
            self.send_status(message=why)
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

    async def inline(self, params: T.InlineCompletionParams) -> dict | None:
        """An InlineCompletionList (as JSON, see `inline_list`) with one item, or None."""
        uri = params.text_document.uri
        since = self.arrival(uri)
        snap = self.usable(uri)
        cursor = None if snap is None else self.offset(snap, params.position)
        if snap is None or cursor is None:
            return None
        if (shown := self.shown.get(uri)) is not None:
            rest = typed_ahead(shown, snap.text, cursor)
            if rest:  # "" means the whole fill was typed (or accepted): what comes next needs the engine
                return self._typed_ahead_item(snap, shown, cursor, rest, since)
        if not await self.worker.debounce(uri, self.settings.debounce_ms):
            return None  # a newer request for this document arrived: it answers instead
        if self.doc_version(uri) != snap.version or self.not_ready():
            return None
        if not snap.tree_fresh:  # the same version, its tree perhaps reparsed meanwhile
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

    async def completion(self, params: T.CompletionParams) -> T.CompletionList | None:
        since = self.arrival(params.text_document.uri)
        snap = self.usable(params.text_document.uri)
        cursor = None if snap is None else self.offset(snap, params.position)
        if snap is None or cursor is None:
            return None
        hole = hole_at_cursor(snap, cursor)
        out = await self.fill(snap, hole, self.request_id(), "inline", since=since)
        if out.fill is None:
            return None
        item = lsp_completion_item(snap, hole, cursor, out.fill, self.encoding)
        return T.CompletionList(is_incomplete=True, items=[item] if item is not None else [])


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
        ls.start_loading()

    @server.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: DgServer, params: T.DidChangeConfigurationParams) -> None:
        ls.apply_settings(params.settings)

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DgServer, params: T.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        ls.store.open(d.uri, d.language_id, d.version, d.text)

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

    @server.feature(T.TEXT_DOCUMENT_INLINE_COMPLETION, T.InlineCompletionOptions())
    async def inline_completion(ls: DgServer, params: T.InlineCompletionParams):
        return await ls.inline(params)

    @server.feature(T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions())
    async def completion(ls: DgServer, params: T.CompletionParams):
        return await ls.completion(params)

    @server.feature(T.TEXT_DOCUMENT_CODE_ACTION,
                    T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.RefactorRewrite]))
    def code_action(ls: DgServer, params: T.CodeActionParams):
        return code_actions(ls, params)

    @server.command(FILL_HOLE)
    async def fill_hole(ls: DgServer, params: T.ExecuteCommandParams):
        return await run_command(ls, params)

    @server.command(REWRITE_SELECTION)
    async def rewrite_selection(ls: DgServer, params: T.ExecuteCommandParams):
        return await run_command(ls, params)

    @server.feature(T.SHUTDOWN)
    def shutdown(ls: DgServer, params: None) -> None:
        ls.worker.shutdown()

    debug.register(server)
    return server
