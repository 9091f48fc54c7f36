"""The engine thread: loads the backend, runs one engine job at a time, debounces and cancels them.

Everything here is called from the event loop except what runs on `EngineThread` (loading, the check fill and
`backend.infill`). The loop never waits on the engine: it awaits an asyncio future wrapping the thread's work.
Cancellation is cooperative: a `Ticket` wraps the backend's cancel flag, which the engine checks between
denoising steps, so a cancelled job stops within one step and frees the thread for the next one.

The backend is whatever the factory returns: anything that satisfies `engine.seam.InfillBackend`
(dg_lsp.backends.factory.build_backend: the embedded engine, the engine service or an OpenAI-compatible server).
"ready" means it loaded and its check fill ran (dg_lsp.loading.check_fill); a remote backend's state then follows
its server (`_follow`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dg_lsp.config import Settings
from dg_lsp.loading import CHECK_FILL_S, ModelCheckError, check_fill
from dg_lsp.sched import short_slice
from engine.seam import CancelFlag, FillResult, InfillBackend, RequestKind, StepDraft

log = logging.getLogger(__name__)

# Engine outputs depend on the sampling seed; a fixed seed makes a fill a pure function of its inputs, which
# is what lets the LRU cache return exactly what a cold run would.
SEED = 0


@dataclass(eq=False)  # identity: tickets live in a set
class Ticket:
    """One engine job as the loop sees it: its cancel token and step counters.

    `steps_done` is written by the engine thread (in on_step) and read by the loop; ints are written
    atomically in CPython, and the figure is a measurement, not a synchronisation device.
    """

    uri: str
    request_id: str
    kind: RequestKind
    token: CancelFlag
    steps_done: int = 0
    steps_at_cancel: int | None = None
    why_cancelled: str | None = None
    started_at: float | None = None  # perf_counter() on the engine thread when the job started / finished
    finished_at: float | None = None

    def cancel(self, why: str) -> None:
        if self.steps_at_cancel is None:
            self.steps_at_cancel = self.steps_done
            self.why_cancelled = why
        self.token.cancel()

    @property
    def steps_after_cancel(self) -> int | None:
        return None if self.steps_at_cancel is None else self.steps_done - self.steps_at_cancel


@dataclass(frozen=True)
class EngineJob:
    """The engine inputs of one fill; `on_step` runs on the engine thread after every denoising step."""

    context_ids: list[int]
    canvas_length: int
    steps: int | None
    entropy_bound: float | None
    max_canvases: int = 1
    seed: int = SEED
    on_step: Callable[[StepDraft], None] | None = field(default=None, compare=False)
    draft_text: bool = False  # decode each step's canvas to text (only dg/draft shows it)
    init_ids: list[int] | None = None  # the seed canvas (engine.seam.InfillBackend.infill), None: from noise
    start_noise: float = 1.0


Check = Callable[[InfillBackend, CancelFlag], None]


class Worker:
    """Owns the backend and its single thread. Create and use on the event loop."""

    def __init__(self, factory: Callable[[Settings], InfillBackend], check: Check | None = check_fill) -> None:
        self._factory = factory
        self._check = check
        self._thread = EngineThread()
        self.engine: InfillBackend | None = None
        self.state = "loading"  # loading | ready | error
        self.error: str | None = None
        self.model_name: str | None = None
        self.generation = 0  # bumps on every (re)load; part of cache keys
        self._latest_call: dict[str, int] = {}
        self._call_ids = itertools.count(1)
        self._tickets: set[Ticket] = set()
        self.on_state_change: Callable[[str], None] | None = None  # called with a message when `state` follows
        # a remote backend's server going away or coming back

    # -- model -------------------------------------------------------------------------------------------

    async def load(self, settings: Settings) -> None:
        """(Re)load the model on the engine thread; queued behind a running job, so the swap is atomic."""
        self.generation += 1
        gen = self.generation
        self.state, self.error = "loading", None
        for t in list(self._tickets):
            t.cancel("model reload")
        t0 = time.perf_counter()
        try:
            engine = await self._thread.submit(self._factory, settings).result
            if self._check is not None and gen == self.generation:
                await self._check_fill(engine)
        except Exception as exc:  # a bad path, a broken checkpoint, no CUDA: report, keep serving
            log.exception("model load failed")
            if gen == self.generation:
                why = str(exc) if isinstance(exc, ModelCheckError) else f"{type(exc).__name__}: {exc}"
                self.engine, self.state, self.error = None, "error", why
            return
        if gen != self.generation:  # a newer load was requested meanwhile
            return
        old, self.engine, self.state = self.engine, engine, "ready"
        self.model_name = engine.name  # dg/status shows it (remote backends say where they run)
        log.info("model %s loaded in %.0f ms", self.model_name, (time.perf_counter() - t0) * 1e3)
        if old is not None and old is not engine:
            old.close()
        self._follow(engine, gen)

    def _follow(self, engine: InfillBackend, gen: int) -> None:
        """A remote backend reports its server going away and coming back; `state` follows it on the loop."""
        loop = asyncio.get_running_loop()

        def heard(state: str, message: str) -> None:  # any thread
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(self._backend_state, gen, state, message)

        engine.watch_state(heard)

    def _backend_state(self, gen: int, state: str, message: str) -> None:
        if gen != self.generation or self.state not in ("ready", "error"):
            return
        self.state, self.error = state, message if state == "error" else None
        if self.on_state_change is not None:
            self.on_state_change(message)

    async def _check_fill(self, engine: InfillBackend) -> None:
        """The check fill on the engine thread, cancelled after CHECK_FILL_S."""
        token = engine.new_cancel_token()
        timer = asyncio.get_running_loop().call_later(CHECK_FILL_S, token.cancel)
        try:
            await self._thread.submit(self._check, engine, token).result
        finally:
            timer.cancel()

    # -- debounce and cancellation -----------------------------------------------------------------------

    async def debounce(self, key: str, delay_ms: int) -> bool:
        """Wait `delay_ms`; True if no newer call with the same key arrived meanwhile (latest wins)."""
        call = next(self._call_ids)
        self._latest_call[key] = call
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        else:
            await asyncio.sleep(0)  # still let already-queued keystrokes through first
        return self._latest_call.get(key) == call

    def ticket(self, uri: str, request_id: str, kind: RequestKind, token: CancelFlag) -> Ticket:
        """A cancel ticket for a new job; a keystroke's job supersedes older keystroke jobs on its document."""
        if kind == "keystroke":
            self.cancel_document(uri, "superseded", kinds=("keystroke",))
        t = Ticket(uri=uri, request_id=request_id, kind=kind, token=token)
        self._tickets.add(t)
        return t

    def release(self, ticket: Ticket) -> None:
        self._tickets.discard(ticket)

    def cancel_document(self, uri: str, why: str, kinds: tuple[RequestKind, ...] = ("keystroke", "command")) -> int:
        hits = [t for t in self._tickets if t.uri == uri and t.kind in kinds]
        for t in hits:
            t.cancel(why)
        return len(hits)

    def cancel_request(self, request_id: str, why: str = "$/cancelRequest") -> bool:
        hits = [t for t in self._tickets if t.request_id == request_id]
        for t in hits:
            t.cancel(why)
        return bool(hits)

    # -- running -----------------------------------------------------------------------------------------

    async def infill(self, ticket: Ticket, job: EngineJob) -> FillResult | None:
        """Run `backend.infill` on the engine thread (None: cancelled before it started). If the awaiting task is
        cancelled, the engine is too."""
        engine = self.engine
        if engine is None:
            raise RuntimeError("the model is not loaded")
        run = self._thread.submit(_run, engine, ticket, job)
        try:
            return await run.result
        except asyncio.CancelledError:
            ticket.cancel("request cancelled")
            # The engine stops within one step; wait for it so the ticket's figures are final when reported.
            with contextlib.suppress(Exception):
                await run.finished
            raise

    def shutdown(self) -> None:
        for t in list(self._tickets):
            t.cancel("shutdown")
        self._thread.shutdown()

    def wait_stopped(self, timeout_s: float) -> bool:
        """After `shutdown`: wait up to `timeout_s` for the engine thread to end (a cancelled job stops within one
        step; a model load runs to its end). True once it has ended, or never started."""
        return self._thread.join(timeout_s)


@dataclass(frozen=True)
class Submitted:
    """A call queued on the EngineThread: `result` (its value or exception; cancelling it does not stop the call)
    and `finished` (set once the call has returned, even when `result` was cancelled)."""

    result: asyncio.Future
    finished: asyncio.Future


class EngineThread:
    """One daemon thread running calls in the order submitted, each answered to the loop as asyncio futures.

    A queue and one call_soon_threadsafe per result cost about half of what a ThreadPoolExecutor behind
    asyncio.wrap_future and asyncio.shield did, in each direction (figures in the commit that made the change).
    """

    def __init__(self, name: str = "dg-engine") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Submitted:
        if self._closed:
            raise RuntimeError("the engine thread has shut down")
        loop = asyncio.get_running_loop()
        out = Submitted(loop.create_future(), loop.create_future())
        if self._thread.ident is None:  # not started yet
            self._thread.start()
        self._queue.put((loop, out, fn, args))
        return out

    def shutdown(self) -> None:
        """Stop after the call running now; calls still queued are answered with an error, not run."""
        self._closed = True
        self._queue.put(None)

    def join(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the thread to end; True when it has (or never started)."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _serve(self) -> None:
        short_slice()  # woken for each job: see dg_lsp.sched
        while (item := self._queue.get()) is not None:
            loop, out, fn, args = item
            value, error = None, None
            if self._closed:
                error = RuntimeError("the engine thread has shut down")
            else:
                try:
                    value = fn(*args)
                except BaseException as e:  # noqa: BLE001 -- handed to the awaiting coroutine
                    error = e
            try:
                loop.call_soon_threadsafe(_settle, out, value, error)
            except RuntimeError:  # the loop is closed: nobody is waiting
                pass


def _settle(out: Submitted, value: Any, error: BaseException | None) -> None:
    if not out.result.done():
        if error is not None:
            out.result.set_exception(error)
        else:
            out.result.set_result(value)
    if not out.finished.done():
        out.finished.set_result(None)


def _run(engine: InfillBackend, ticket: Ticket, job: EngineJob) -> FillResult | None:
    """Engine thread. A job cancelled while it waited in the queue never reaches the engine."""
    if ticket.token.cancelled:
        return None

    def on_step(draft: StepDraft) -> None:
        ticket.steps_done += 1
        if job.on_step is not None:
            job.on_step(draft)

    assert threading.current_thread() is not threading.main_thread()
    ticket.started_at = time.perf_counter()
    try:
        return engine.infill(job.context_ids, canvas_length=job.canvas_length, steps=job.steps,
                             entropy_bound=job.entropy_bound, max_canvases=job.max_canvases, seed=job.seed,
                             cancel=ticket.token, on_step=on_step, draft_text=job.draft_text,
                             init_ids=job.init_ids, start_noise=job.start_noise)
    finally:
        ticket.finished_at = time.perf_counter()
