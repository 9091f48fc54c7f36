"""The engine thread: loads the backend, runs one engine job at a time, debounces and cancels them.

Everything here is called from the event loop except what runs on the engine thread (loading, the check fill and
`backend.infill`). The loop never waits on the engine: it awaits an asyncio future wrapping the thread's work.
The thread, the job (`Ticket`, an engine.seam_jobs.FillJob), its inputs and the supersede rule are the shape the
engine service's scheduler shares (engine/seam_jobs.py); this module adds the server's own: calls answered as
asyncio futures, debounce, and cancelling by document or request. Cancellation is cooperative: a ticket's cancel
flag is the backend's own, which the engine checks between denoising steps, so a cancelled job stops within one
step and frees the thread for the next one.

The backend is whatever the factory returns: anything that satisfies `engine.seam.InfillBackend`
(dg_lsp.backends.factory.build_backend: the embedded engine, the engine service or an OpenAI-compatible server).
"ready" means it loaded and its check fill ran (dg_lsp.backends.loading.check_fill); a remote backend's state then
follows its server (`_follow`). A fill holds one `Loaded` handle from prompt to job, so a reload in between cannot make
it build the prompt for one backend and run it on another.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dg_lsp.backends.loading import CHECK_FILL_S, ModelCheckError, check_fill
from dg_lsp.config import Settings
from dg_lsp.sched import short_slice
from engine.seam import CancelFlag, FillResult, InfillBackend, RequestKind, StepDraft
from engine.seam_jobs import EngineThread, FillInputs, FillJob, Jobs

log = logging.getLogger(__name__)

# Engine outputs depend on the sampling seed; a fixed seed makes a fill a pure function of its inputs, which
# is what lets the LRU cache return exactly what a cold run would.
SEED = 0


@dataclass(frozen=True)
class Loaded:
    """The loaded backend and the load it came from (`Worker.loaded`). A fill holds one from its prompt to its job:
    the prompt is built with this backend's format and encoder, and the job runs on this backend or not at all
    (`Worker.infill` refuses a handle a reload has replaced)."""

    backend: InfillBackend
    generation: int


@dataclass(eq=False, kw_only=True)  # identity: tickets live in a set
class Ticket(FillJob):
    """One engine job as the loop sees it (engine.seam_jobs.FillJob: backend, inputs, cancel, step counts), with
    what the server cancels it by: its document, its request, and what asked for it."""

    uri: str
    request_id: str
    kind: RequestKind
    generation: int  # the load its backend came from (Loaded.generation)


Check = Callable[[InfillBackend, CancelFlag], None]


class Worker:
    """Owns the backend and its single thread. Create and use on the event loop."""

    def __init__(self, factory: Callable[[Settings], InfillBackend], check: Check | None = check_fill) -> None:
        self._factory = factory
        self._check = check
        self._thread = EngineCalls()
        self.engine: InfillBackend | None = None
        self.state = "loading"  # loading | ready | error
        self.error: str | None = None
        self.model_name: str | None = None
        self.generation = 0  # bumps on every (re)load; part of cache keys
        self._latest_call: dict[str, int] = {}
        self._call_ids = itertools.count(1)
        self._tickets: Jobs[Ticket] = Jobs()
        self.on_state_change: Callable[[str], None] | None = None  # called with a message when `state` follows
        # a remote backend's server going away or coming back

    # -- model -------------------------------------------------------------------------------------------

    @property
    def loaded(self) -> Loaded | None:
        """The backend a fill starting now builds its prompt with and runs on (None: none is loaded)."""
        return None if self.engine is None else Loaded(self.engine, self.generation)

    async def load(self, settings: Settings) -> None:
        """(Re)load the model on the engine thread; queued behind a running job, so the swap is atomic."""
        self.generation += 1
        gen = self.generation
        self.state, self.error = "loading", None
        self._tickets.cancel(lambda t: True, "model reload")
        t0 = time.perf_counter()
        try:
            engine = await self._thread.submit(self._factory, settings).result
            if self._check is not None and gen == self.generation:
                await self._check_fill(engine)
        except Exception as exc:  # a bad path, a broken checkpoint, no CUDA: report, keep serving
            if isinstance(exc, ModelCheckError):  # a checkpoint refused by name: one line, no traceback
                log.error("model load failed: %s", exc)
            else:
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
        assert self._check is not None
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

    def ticket(self, uri: str, request_id: str, kind: RequestKind, engine: Loaded, inputs: FillInputs,
               on_step: Callable[[StepDraft], None] | None = None) -> Ticket:
        """A new job on `engine`'s backend; a keystroke's job supersedes older keystroke jobs on its document (its
        supersede key is the document; a command's is None: never superseded). `release` it when done."""
        t = Ticket(engine.backend, inputs, key=uri if kind == "keystroke" else None, on_step=on_step, uri=uri,
                   request_id=request_id, kind=kind, generation=engine.generation)
        self._tickets.add(t, "superseded")
        return t

    def release(self, ticket: Ticket) -> None:
        self._tickets.discard(ticket)

    def cancel_document(self, uri: str, why: str, kinds: tuple[RequestKind, ...] = ("keystroke", "command")) -> int:
        return len(self._tickets.cancel(lambda t: t.uri == uri and t.kind in kinds, why))

    def cancel_request(self, request_id: str, why: str = "$/cancelRequest") -> bool:
        return bool(self._tickets.cancel(lambda t: t.request_id == request_id, why))

    # -- running -----------------------------------------------------------------------------------------

    async def infill(self, ticket: Ticket) -> FillResult | None:
        """Run the ticket's fill on the engine thread, on the backend it was made for (None: cancelled before it
        started, or that backend was replaced by a reload since: the job is cancelled, "model reload", and no
        backend sees it). If the awaiting task is cancelled, the engine is too."""
        if ticket.generation != self.generation or ticket.backend is not self.engine:
            ticket.cancel("model reload")
            return None
        run = self._thread.submit(ticket.run)
        try:
            res: FillResult | None = await run.result
            return res
        except asyncio.CancelledError:
            ticket.cancel("request cancelled")
            # The engine stops within one step; wait for it so the ticket's figures are final when reported.
            with contextlib.suppress(Exception):
                await run.finished
            raise

    def shutdown(self) -> None:
        self._tickets.cancel(lambda t: True, "shutdown")
        self._thread.shutdown()

    def wait_stopped(self, timeout_s: float) -> bool:
        """After `shutdown`: wait up to `timeout_s` for the engine thread to end (a cancelled job stops within one
        step; a model load runs to its end). True once it has ended, or never started."""
        return self._thread.join(timeout_s)


@dataclass(frozen=True)
class Submitted:
    """A call queued on the engine thread: `result` (its value or exception; cancelling it does not stop the call)
    and `finished` (set once the call has returned, even when `result` was cancelled)."""

    result: asyncio.Future[Any]
    finished: asyncio.Future[None]


class EngineCalls:
    """The server's engine thread (engine.seam_jobs.EngineThread): calls run in the order submitted, each answered
    to the loop as asyncio futures (a load, a check fill, a ticket's fill).

    A queue and one call_soon_threadsafe per result cost about half of what a ThreadPoolExecutor behind
    asyncio.wrap_future and asyncio.shield did, in each direction (figures in the commit that made the change).
    """

    def __init__(self, name: str = "dg-engine") -> None:
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, Submitted, Callable[..., Any],
                                             tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._thread = EngineThread(self._take, name, on_start=short_slice)  # woken for each job: dg_lsp.sched
        self._closed = False

    @property
    def thread(self) -> threading.Thread:
        return self._thread.thread

    def submit(self, fn: Callable[..., Any], *args: Any) -> Submitted:
        if self._closed:
            raise RuntimeError("the engine thread has shut down")
        loop = asyncio.get_running_loop()
        out = Submitted(loop.create_future(), loop.create_future())
        self._thread.start()
        self._queue.put((loop, out, fn, args))
        return out

    def shutdown(self) -> None:
        """Stop after the call running now; calls still queued are answered with an error, not run."""
        self._closed = True
        self._queue.put(None)

    def join(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the thread to end; True when it has (or never started)."""
        return self._thread.join(timeout_s)

    def _take(self) -> Callable[[], None] | None:  # engine thread
        item = self._queue.get()
        return None if item is None else functools.partial(self._call, *item)

    def _call(self, loop: asyncio.AbstractEventLoop, out: Submitted, fn: Callable[..., Any],
              args: tuple[Any, ...]) -> None:  # engine thread
        value: Any = None
        error: BaseException | None = None
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
