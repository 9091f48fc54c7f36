"""The engine thread: loads the model, runs one engine job at a time, debounces and cancels them.

Everything here is called from the event loop except what runs on `EngineThread` (model loading, the check
fill and `engine.infill`). The loop never waits on the engine: it awaits an asyncio future wrapping the thread's
work. Cancellation is cooperative: a `Ticket` wraps the engine's `CancelToken`, which the engine checks between
denoising steps, so a cancelled job stops within one step and frees the thread for the next one.

A model is "ready" only once it has loaded AND a check fill (one short canvas through the engine seam) has run;
what a checkpoint lacks or gets wrong (no tokenizer, damaged weights, canvas lengths the model cannot hold) is an
"error" with a message that says what to do, and the server keeps serving (requests answer empty).
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

log = logging.getLogger(__name__)

# Engine outputs depend on the sampling seed; a fixed seed makes a fill a pure function of its inputs, which
# is what lets the LRU cache return exactly what a cold run would.
SEED = 0
CHECK_PREFIX, CHECK_SUFFIX = "def add(a, b):\n    return ", "\n"
CHECK_STEPS = 2
CHECK_FILL_S = 120.0  # the check fill (one short canvas, two steps) is cancelled after this long


class ModelCheckError(RuntimeError):
    """A checkpoint the server cannot serve from; the message says why and what to do."""


def load_engine(settings: Settings) -> Any:
    """The product path: the real engine (imported here so `dg-lsp --version` does not import torch).

    On CPU the engine gets one intra-op thread. A small code model's matrices are too small to gain from more,
    and extra threads fight the editor and this server's event loop for the cores: on 2 busy cores a 48-step
    fill of the tiny test model took 0.4-0.9 s with one thread and 3-18 s with torch's default two.
    The `service` and `openai` backends are built by dg_lsp.backends.factory (no torch in this process).
    """
    if settings.backend != "embedded":
        from dg_lsp.backends.factory import build_backend

        return build_backend(settings)
    import torch

    from engine.engine import Engine

    if settings.device == "cpu" or (settings.device == "auto" and not torch.cuda.is_available()):
        torch.set_num_threads(1)
    engine = Engine.from_pretrained(settings.model_path, device=settings.device, dtype=settings.dtype,
                                    prompt_format=settings.prompt_format)
    check_engine(engine)
    return engine


def check_engine(engine: Any) -> None:
    """What the embedded engine needs before it can serve, each failure a ModelCheckError that says what to do:
    a tokenizer, canvases the model can hold, weights and logits that are finite. (Before the check fill: a canvas
    of 200,000 tokens would not finish, and damaged weights give NaN logits, which decode to empty fills.)"""
    import torch

    from engine.model import KVCache

    path = engine.path
    if engine.tokenizer is None:
        raise ModelCheckError(f"{path.name} has no tokenizer.json: the server reads code through the checkpoint's "
                              f"tokenizer; put the tokenizer.json that came with the checkpoint into {path.name}/")
    fmt, limit = engine.prompt_format, engine.config.text.max_position_embeddings
    longest, context = max(fmt.canvas_lengths), fmt.max_context_tokens or 0
    if longest + context + 4 > limit:
        raise ModelCheckError(
            f"{path.name}/infill.json: canvas_lengths go up to {longest} tokens (with a context of up to {context}), "
            f"more than the model's {limit} positions (max_position_embeddings in config.json); list the canvas "
            f"lengths the model was trained with (infill.json's canvas_lengths)")
    bad = [name for name, p in engine.model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise ModelCheckError(f"{path.name}: {len(bad)} weight tensor(s) hold NaN or infinite values (the first: "
                              f"{bad[0]}); the weights file is damaged: export or download it again")
    with torch.inference_mode():
        ids = engine.prompt_format.context(engine.encode(CHECK_PREFIX), engine.encode(CHECK_SUFFIX))
        cache = engine.model.encode(torch.tensor([ids], dtype=torch.long, device=engine.device), KVCache())
        canvas = torch.zeros((1, min(fmt.canvas_lengths)), dtype=torch.long, device=engine.device)
        logits = engine.model.decode(canvas, cache, None)  # (1, C, V)
    if not bool(torch.isfinite(logits).all()):
        raise ModelCheckError(f"{path.name}: the model's logits on a test prompt are not finite (NaN or infinite): "
                              f"the weights are damaged or do not fit the dtype {engine.dtype}; try dtype float32 "
                              f"or export the checkpoint again")


def check_fill(engine: Any, cancel: Any) -> None:
    """Engine thread: one short fill through the engine seam (`prompt_format`, `encode`, `infill`), so "ready"
    means a fill has run. Raises ModelCheckError when it cannot."""
    try:
        fmt = engine.prompt_format
        ids = fmt.context(engine.encode(CHECK_PREFIX), engine.encode(CHECK_SUFFIX))
        res = engine.infill(ids, canvas_length=min(fmt.canvas_lengths), steps=CHECK_STEPS, seed=SEED, cancel=cancel)
    except Exception as exc:  # noqa: BLE001 -- any failure of the check is the checkpoint's
        raise ModelCheckError(f"the check fill failed: {type(exc).__name__}: {exc}") from exc
    if res.cancelled:
        raise ModelCheckError(f"the check fill (one canvas of {min(fmt.canvas_lengths)} tokens, {CHECK_STEPS} "
                              f"steps) did not finish within {CHECK_FILL_S:.0f} s")
    if not isinstance(res.text, str):
        raise ModelCheckError(f"the check fill returned {type(res.text).__name__}, not text")


def new_cancel_token() -> Any:
    """A cancel flag for one job. Torch-free: a server on the service or openai backend never imports torch
    (peak RSS of such a server: ~280 MiB with torch imported, ~75 MiB without; python -m bench.service)."""
    from dg_lsp.backends.remote import CancelToken

    return CancelToken()


@dataclass(eq=False)  # identity: tickets live in a set
class Ticket:
    """One engine job as the loop sees it: its cancel token and step counters.

    `steps_done` is written by the engine thread (in on_step) and read by the loop; ints are written
    atomically in CPython, and the figure is a measurement, not a synchronisation device.
    """

    uri: str
    request_id: str
    kind: str  # "inline" | "command"
    token: Any
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
    on_step: Callable[[Any], None] | None = field(default=None, compare=False)
    draft_text: bool = False  # decode each step's canvas to text (only dg/draft shows it)


class Worker:
    """Owns the engine and its single thread. Create and use on the event loop."""

    def __init__(self, factory: Callable[[Settings], Any] = load_engine,
                 token_factory: Callable[[], Any] = new_cancel_token,
                 check: Callable[[Any, Any], None] | None = check_fill) -> None:
        self._factory = factory
        self._token_factory = token_factory
        self._check = check
        self._thread = EngineThread()
        self.engine: Any = None
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
        self.model_name = str(getattr(engine, "name", None) or settings.model_path or "default model")
        log.info("model %s loaded in %.0f ms", self.model_name, (time.perf_counter() - t0) * 1e3)
        if old is not None and old is not engine and hasattr(old, "close"):
            old.close()
        self._follow(engine, gen)

    def _follow(self, engine: Any, gen: int) -> None:
        """A remote backend reports its server going away and coming back; `state` follows it on the loop."""
        watch = getattr(engine, "watch_state", None)
        if watch is None:
            return
        loop = asyncio.get_running_loop()

        def heard(state: str, message: str) -> None:  # any thread
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(self._backend_state, gen, state, message)

        watch(heard)

    def _backend_state(self, gen: int, state: str, message: str) -> None:
        if gen != self.generation or self.state not in ("ready", "error"):
            return
        self.state, self.error = state, message if state == "error" else None
        if self.on_state_change is not None:
            self.on_state_change(message)

    async def _check_fill(self, engine: Any) -> None:
        """The check fill on the engine thread, cancelled after CHECK_FILL_S."""
        token = self._token_factory()
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

    def ticket(self, uri: str, request_id: str, kind: str) -> Ticket:
        """A cancel ticket for a new job; a new inline job supersedes older inline jobs on its document."""
        if kind == "inline":
            self.cancel_document(uri, "superseded", kinds=("inline",))
        t = Ticket(uri=uri, request_id=request_id, kind=kind, token=self._token_factory())
        self._tickets.add(t)
        return t

    def release(self, ticket: Ticket) -> None:
        self._tickets.discard(ticket)

    def cancel_document(self, uri: str, why: str, kinds: tuple[str, ...] = ("inline", "command")) -> int:
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

    async def infill(self, ticket: Ticket, job: EngineJob) -> Any:
        """Run `engine.infill` on the engine thread. If the awaiting task is cancelled, the engine is too."""
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


@dataclass(frozen=True)
class Submitted:
    """A call queued on the EngineThread: `result` (its value or exception; cancelling it does not stop the call)
    and `finished` (set once the call has returned, even when `result` was cancelled)."""

    result: asyncio.Future
    finished: asyncio.Future


class EngineThread:
    """One daemon thread running calls in the order submitted, each answered to the loop as asyncio futures.

    A ThreadPoolExecutor behind asyncio.wrap_future and asyncio.shield cost ~0.15 ms to start a call and ~0.38 ms
    to get its result back to the loop (p50, a 20 ms call every 5 ms); a queue and one call_soon_threadsafe per
    result take ~0.08 and ~0.26 ms.
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

    def _serve(self) -> None:
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


def _run(engine: Any, ticket: Ticket, job: EngineJob) -> Any:
    """Engine thread. A job cancelled while it waited in the queue never reaches the engine."""
    if ticket.token.cancelled:
        return None

    def on_step(draft: Any) -> None:
        ticket.steps_done += 1
        if job.on_step is not None:
            job.on_step(draft)

    assert threading.current_thread() is not threading.main_thread()
    ticket.started_at = time.perf_counter()
    try:
        return engine.infill(job.context_ids, canvas_length=job.canvas_length, steps=job.steps,
                             entropy_bound=job.entropy_bound, max_canvases=job.max_canvases, seed=job.seed,
                             cancel=ticket.token, on_step=on_step, draft_text=job.draft_text)
    finally:
        ticket.finished_at = time.perf_counter()
