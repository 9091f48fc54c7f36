"""One LSP session's state, and what every handler shares: settings, documents, the engine worker, the fill
caches, the arrival of requests, dg/status, and the background reparse.

Everything here runs on the event loop and nothing blocks it; engine work runs on the worker's thread against an
immutable `Snapshot`. The handlers are in dg_lsp.handlers (one module per request family), the wiring is
dg_lsp.server, the fill itself is dg_lsp.fill.pipeline.

Requests are read against the document as it was when they ARRIVED. A request's work runs as a task, which starts
only after the messages already read have been handled: a request followed by a didChange in one read would
otherwise see the changed document and apply version-1 positions to version 2. So each request has an `arrive`
part that the dispatcher (dg_lsp.wire.dispatch) runs as the message is read, in order with the didChanges: `receive`
(positions checked, the snapshot, the trace); its task then works on that snapshot, and results are dropped if the
document has moved on before they are sent. The session talks to the editor through its `Client`
(dg_lsp.wire.outgoing) and learns when messages arrived from the dispatcher's `Clock`.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidParams

from dg_lsp.backends.checkpoint import default_model_dir
from dg_lsp.backends.factory import build_backend
from dg_lsp.backends.loading import check_fill
from dg_lsp.config import UNCALIBRATED_MIN_CONFIDENCE, Settings
from dg_lsp.context.workspace import Workspace
from dg_lsp.documents import DocumentStore, Encoding, Snapshot
from dg_lsp.fill.cache import FillCaches, Shown
from dg_lsp.fill.holes import Hole
from dg_lsp.fill.pipeline import (
    HOLE_FILL,
    LOW_CONFIDENCE,
    FillEvents,
    FillOutcome,
    FillStats,
    Policy,
    Shape,
    run_fill,
)
from dg_lsp.fill.worker import Check, Loaded, Worker
from dg_lsp.memory import TRIM_AFTER_S, release_free_memory
from dg_lsp.nextedit.state import NextEdits
from dg_lsp.trace import Trace
from dg_lsp.wire.dispatch import Clock
from dg_lsp.wire.outgoing import Client
from engine.seam import InfillBackend, RequestKind

log = logging.getLogger(__name__)

STATUS = "dg/status"
DRAFT = "dg/draft"
# The background reparse (`catch_up`): slices of 1 ms, 1 ms apart, while idle (no fill running, no message in or
# answer out for 3 ms). Keystrokes never wait for it (`keystroke_snapshot`).
PARSE_SLICE_S, PARSE_IDLE_S = 0.001, 0.003
COMMAND_PARSE_S = 2.0  # a command waits this long (in slices, the loop serving meanwhile) for a fresh tree
# Said once per session, the first time the shipped demo model's gate withholds a fill (a new user otherwise sees
# nothing happen: no ghost text, Tab inserts a tab).
DEMO_MODEL_WITHHELD = (
    "dg-lsp is running its built-in demo model, a tiny placeholder: most of its fills fall below its confidence gate "
    "and are held back, so nothing appears. To see them anyway, run \"Fill hole\" and then its code action \"Fill "
    "hole anyway\", or set minConfidence to 0 to show every fill. For useful fills, set modelPath to a real "
    "checkpoint (see the README).")


def server_version() -> str:
    try:
        return importlib.metadata.version("dg-lsp")
    except importlib.metadata.PackageNotFoundError:  # running from a checkout that was not pip-installed
        return "0.1.0+checkout"


@dataclass(frozen=True)
class Received:
    """A request as it arrived, in order with the didChanges around it: its JSON-RPC id, its document then (None:
    not open) and its trace (timed from the keystroke's didChange)."""

    id: str
    snap: Snapshot | None
    trace: Trace


class DgServer:
    """The session: what the handlers share. `client`: messages to the editor; `clock`: when messages arrived."""

    def __init__(self, engine_factory: Callable[[Settings], InfillBackend] = build_backend,
                 default_model: str | None = None, check: Check | None = check_fill,
                 client: Client | None = None, clock: Clock | None = None) -> None:
        self.client = client if client is not None else Client()
        self.clock = clock if clock is not None else Clock()
        self.encoding: Encoding = "utf-16"  # agreed at `initialize` (dg_lsp.wire.capabilities)
        self.settings = Settings()
        self.default_model = default_model  # `--model`: used while the client's modelPath is null
        self.store = DocumentStore()
        self.worker = Worker(engine_factory, check)
        self.worker.on_state_change = lambda message: self.send_status(message=message)  # a remote backend's server
        self.caches = FillCaches()
        self.shown: dict[str, Shown] = {}  # uri -> the inline fill last shown (typed-ahead)
        self.last_latency_ms: float | None = None
        self.load_task: asyncio.Task | None = None
        self.loads = itertools.count(1)  # numbers the loads' progress tokens
        self._reparses: dict[str, asyncio.Task] = {}
        self._in_flight = 0  # fills running
        self._active_at = 0.0  # when a fill last finished or an answer was last written (see `_catch_up`)
        self._change_at: dict[str, tuple[float, float]] = {}  # uri -> (arrival, end) of its latest didChange
        self._after_answer: dict[str, tuple[dict[str, Any], Trace, float]] = {}  # request id -> dg/status body
        self._trim: asyncio.TimerHandle | None = None  # the pending release_memory_soon
        self._calibrated: tuple[InfillBackend | None, float] | None = None  # (backend, its calibrated gate)
        self._gpu: tuple[InfillBackend, dict[str, Any] | None] | None = None  # (backend, its self-check report)
        # uri -> the last command the confidence gate withheld there: (identity, start, end, rewrite, confidence);
        # its code action offers to run it again with force (dg_lsp.handlers.commands)
        self.withheld: dict[str, tuple[tuple[int, int], int, int, bool, float]] = {}
        self.cross_file = Workspace(self.store)  # context from other files (dg_lsp.context)
        self.roots: list[str] = []  # the client's workspace folders (paths), from `initialize`
        self.next_edits = NextEdits()  # edit histories, proposals and counts of next edits (dg_lsp.nextedit)
        self.experimental: dict[str, Any] = {}  # initialize's capabilities.experimental (e.g. dgNextEdit)
        self.told_demo_gate = False  # DEMO_MODEL_WITHHELD has been said in this session

    # -- small helpers ----------------------------------------------------------------------------------------

    def moved_on(self, snap: Snapshot) -> bool:
        """Has the document changed, closed or been reopened since `snap` was taken?"""
        return self.store.identity(snap.uri) != snap.identity

    def offset(self, snap: Snapshot, pos: T.Position) -> int:
        """Offset of `pos` (checked by `receive`: its line exists; a character past the line's end means the line's
        end, as LSP says)."""
        return snap.offset_at(pos.line, pos.character, self.encoding)

    def min_confidence(self) -> float:
        """The confidence gate in force: the minConfidence setting, else the loaded checkpoint's calibrated value
        (its settings_in_force, from infill.json), else UNCALIBRATED_MIN_CONFIDENCE."""
        if self.settings.min_confidence is not None:
            return float(self.settings.min_confidence)
        backend = self.worker.engine
        if self._calibrated is None or self._calibrated[0] is not backend:  # read once per loaded backend
            entry = backend.settings_in_force().get("min_confidence") if backend is not None else None
            value = entry.get("value") if isinstance(entry, dict) else None
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            self._calibrated = (backend, float(value) if ok else UNCALIBRATED_MIN_CONFIDENCE)
        return self._calibrated[1]

    def on_demo_model(self) -> bool:
        """Do fills come from the shipped demo model (modelPath, else `--model`, unset or naming it; an
        OpenAI-compatible server serves its own model and is never gated)?"""
        path = self.settings.model_path or self.default_model
        shipped = path is None or Path(path).expanduser().resolve() == default_model_dir().resolve()
        return shipped and self.settings.backend != "openai"

    def demo_gate_notice(self) -> str | None:
        """DEMO_MODEL_WITHHELD the first time in this session that the demo model's gate withholds a fill (the caller
        says it), else None."""
        if self.told_demo_gate or not self.on_demo_model():
            return None
        self.told_demo_gate = True
        return DEMO_MODEL_WITHHELD

    def state(self) -> str:
        return "disabled" if not self.settings.enabled else self.worker.state

    def not_ready(self) -> str | None:
        """Why no fill can run now (None: the model is ready)."""
        if self.worker.state == "ready" and self.worker.engine is not None:
            return None
        return f"model not ready ({self.worker.state})"

    def send_status(self, state: str | None = None, message: str = "", request: dict | None = None) -> None:
        body: dict[str, Any] = {"state": state or self.state(), "message": message,
                                "model": self.worker.model_name, "lastLatencyMs": self.last_latency_ms}
        if request is not None:
            body["request"] = request
        if self.next_edits.counts.requested:
            body["nextEdit"] = self.next_edits.counts.wire()
        if (gpu := self.gpu_status()) is not None:
            body["gpu"] = gpu
        self.client.notify(STATUS, body)

    def gpu_status(self) -> dict[str, Any] | None:
        """dg/status "gpu": the loaded backend's self-check at load (its settings_in_force "gpu": the pieces checked
        and those that fell back to the eager path); None when the backend has none. Read once per loaded backend,
        which is when the one warning about pieces that fell back is shown."""
        backend = self.worker.engine
        if backend is None:
            return None
        if self._gpu is None or self._gpu[0] is not backend:
            entry = backend.settings_in_force().get("gpu")
            value = entry.get("value") if isinstance(entry, dict) else None
            self._gpu = (backend, value if isinstance(value, dict) else None)
            fell = self._gpu[1].get("fellBack") if self._gpu[1] is not None else None
            if fell:
                what = "; ".join(f"{f.get('piece')} ({f.get('reason')})" for f in fell if isinstance(f, dict))
                self.warn(f"dg-lsp: {len(fell)} GPU piece(s) failed their self-check and are switched off; the eager "
                          f"path serves instead (slower, same fills): {what}. Run `dg-lsp doctor` and paste its "
                          "report into an issue.")
        return self._gpu[1]

    def warn(self, message: str) -> None:
        log.warning("%s", message)
        self.client.show_message(T.MessageType.Warning, message)

    # -- dg/status after a fill -------------------------------------------------------------------------------

    def report(self, stats: FillStats, trace: Trace, after_answer: bool) -> None:
        """Send a fill's dg/status: for a keystroke's request once its answer is written (`after_response`), with
        the server's own time from the arrival to that write; else (and for a cancelled or failed one) now. A
        failed fill's status says why in its message."""
        self.last_latency_ms = round(stats.total_ms, 1)
        if after_answer and stats.reason not in ("cancelled", "error"):
            self.status_after_answer(stats.wire(), trace, stats.engine_ms)
        else:
            self.send_status(message=f"the fill failed: {stats.error}" if stats.error else "", request=stats.wire())

    def status_after_answer(self, body: dict[str, Any], trace: Trace, engine_ms: float = 0.0) -> None:
        self._after_answer[body["id"]] = (body, trace, engine_ms)
        while len(self._after_answer) > 64:  # a request never answered must not pile up
            self._after_answer.pop(next(iter(self._after_answer)))

    def after_response(self, msg_id: str) -> None:
        """The dispatcher calls this once an answer is written."""
        self._active_at = now = time.perf_counter()  # the client's next message is likely close: not idle yet
        pending = self._after_answer.pop(msg_id, None)
        if pending is not None:
            body, trace, engine_ms = pending
            out = self.client.handed_at or now  # see dg_lsp.wire.stdio.TimedWriter
            body.update(trace.figures(out, now, engine_ms))
            self.send_status(request=body)

    # -- requests: arrival, task, cancellation ----------------------------------------------------------------

    def note_change(self, uri: str, arrived: float | None) -> None:
        """A didChange for `uri` that arrived at `arrived` has been handled (the next request is timed from it);
        None: forget the last one (the document closed)."""
        if arrived is None:
            self._change_at.pop(uri, None)
        else:
            self._change_at[uri] = (arrived, time.perf_counter())

    def receive(self, request_id: str, uri: str, positions: Sequence[T.Position] = (), what: str = "request"
                ) -> Received:
        """Run where the request arrives (see the module docstring): its document's snapshot now, before any
        later didChange, and its trace. A position on a line past the document's end is Invalid Params."""
        snap = self.store.snapshot(uri, 0.0)
        for pos in positions if snap is not None else ():
            if pos.line >= len(snap.starts):
                raise JsonRpcInvalidParams(f"{what}: position is outside the document (line {pos.line}; version "
                                           f"{snap.version} has {len(snap.starts)} lines)")
        got = self.clock.received_at
        change = self._change_at.pop(uri, None)  # the first request after a didChange is timed from it
        trace = Trace(got) if change is None else Trace(change[0], max(0.0, got - change[1]))
        return Received(request_id, snap, trace)

    def on_cancel_request(self, request_id: str) -> None:
        """$/cancelRequest (the dispatcher answers it and cancels its task): its engine job stops too."""
        if self.worker.cancel_request(request_id):
            log.info("request %s cancelled: engine job cancelled", request_id)

    # -- fills ------------------------------------------------------------------------------------------------

    async def fill(self, snap: Snapshot, hole: Hole, kind: RequestKind, trace: Trace, request_id: str,
                   progress_token: T.ProgressToken | None = None, force: bool = False,
                   shape: Shape = HOLE_FILL, loaded: Loaded | None = None) -> FillOutcome:
        """The fill pipeline for `snap` (dg_lsp.fill.pipeline), with this session's settings, backend and caches;
        `shape`: a hole's fill, or a next edit's (dg_lsp.nextedit); `loaded`: the backend the caller already read
        its prompt format from (default: the one loaded now)."""
        # one backend from prompt to job (dg_lsp.fill.worker.Loaded)
        engine = loaded if loaded is not None else self.worker.loaded
        assert engine is not None, "callers check not_ready() first"
        events = FillEvents(draft=functools.partial(self.client.notify, DRAFT),
                            busy=functools.partial(self.send_status, "busy"),
                            progress=None if progress_token is None else functools.partial(self._progress,
                                                                                            progress_token))
        self._in_flight += 1
        try:
            policy = Policy.of(self.settings, kind, self.encoding, self.min_confidence(), force)
            related = self.cross_file.related if self.cross_file.index is not None else None
            index = self.cross_file.status() if related is not None else None  # as it was when the prompt was built
            out = await run_fill(snap, hole, policy, engine, self.caches,
                                 worker=self.worker, request_id=request_id, trace=trace,
                                 identity_of=self.store.identity, events=events, related=related, shape=shape)
            out.stats.index = index
            # a command's withheld fill says it in its one message (dg_lsp.handlers.commands.withheld), the notice in
            # it: a notice of its own came in the same instant, and an editor drops a burst's fourth notification
            # (VS Code: more than 3 within 800 ms), which was the extension's own "Apply anyway" offer
            if out.reason == LOW_CONFIDENCE and kind != "command" and (notice := self.demo_gate_notice()) is not None:
                self.client.show_message(T.MessageType.Info, notice)
            return out
        finally:
            self._in_flight -= 1
            # its answer is about to be written: a reparse slice now would sit on the keystroke's path
            self._active_at = time.perf_counter()

    def _progress(self, token: T.ProgressToken, step: int, steps: int) -> None:
        pct = min(100, int(100 * step / max(steps, 1)))
        self.client.progress(token, T.WorkDoneProgressReport(message=f"step {step}/{steps}", percentage=pct))

    # -- documents: memory after closes ---------------------------------------------------------------------------

    def release_memory_soon(self) -> None:
        """After a didClose: once none has come for TRIM_AFTER_S, hand the freed memory back to the OS (in a
        thread: a trim of a big heap takes milliseconds; see dg_lsp.memory)."""
        if self._trim is not None:
            self._trim.cancel()
        loop = asyncio.get_running_loop()
        self._trim = loop.call_later(TRIM_AFTER_S, lambda: loop.run_in_executor(None, release_free_memory))

    # -- documents: the background reparse ----------------------------------------------------------------------

    def keystroke_snapshot(self, uri: str) -> Snapshot | None:
        """A snapshot without waiting for a reparse. The reparse a change needs runs in the background
        (`catch_up`) while the server is idle; until it has finished, the snapshot holds the last tree with the
        edits applied (`Snapshot.tree_fresh` False): positions right, structure as of the last parse."""
        return self.store.snapshot(uri, 0.0)

    def catch_up(self, uri: str) -> None:
        """Start reparsing `uri` in the background (on the loop, in slices; a thread would compete with the loop
        for the CPU on small machines)."""
        if uri not in self._reparses:
            self._reparses[uri] = asyncio.ensure_future(self._catch_up(uri))

    def idle_wait(self) -> float:
        """Seconds a background slice should wait before it runs (0: the server is idle now); see `_catch_up`."""
        if self._in_flight:
            return 10 * PARSE_SLICE_S
        quiet = time.perf_counter() - max(self.clock.received_at, self._active_at, self.clock.input_at)
        return 0.0 if quiet > PARSE_IDLE_S else max(PARSE_SLICE_S, PARSE_IDLE_S - quiet)

    async def _catch_up(self, uri: str) -> None:
        delay = PARSE_SLICE_S
        try:
            while (doc := self.store.get(uri)) is not None:
                await asyncio.sleep(delay)  # messages first
                if self._in_flight:
                    delay = 10 * PARSE_SLICE_S
                    continue
                # input_at: a keystroke that came in this very loop iteration, not yet read, is not idle time
                quiet = time.perf_counter() - max(self.clock.received_at, self._active_at, self.clock.input_at)
                if quiet <= PARSE_IDLE_S:  # sleep until it may be idle (1 ms polls would wake the loop mid-keystroke)
                    delay = max(PARSE_SLICE_S, PARSE_IDLE_S - quiet)
                    continue
                if self.store.get(uri) is not doc or doc.parse(PARSE_SLICE_S):
                    return
                delay = PARSE_SLICE_S
        finally:
            self._reparses.pop(uri, None)

    async def fresh_snapshot(self, snap: Snapshot) -> Snapshot:
        """`snap` with its tree reparsed, for a command: the reparse runs in slices, the loop serving in between,
        for at most COMMAND_PARSE_S; if the document changes meanwhile, or the time runs out, `snap` as it is."""
        deadline = time.perf_counter() + COMMAND_PARSE_S
        while not snap.tree_fresh and time.perf_counter() < deadline:
            doc = self.store.get(snap.uri)
            if doc is None or (doc.opened, doc.version) != snap.identity:
                return snap
            if doc.parse(5 * PARSE_SLICE_S):
                return doc.snapshot(0.0)
            await asyncio.sleep(0)
        return snap

