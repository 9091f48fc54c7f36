"""The service's scheduler: one engine thread, a client's newer request supersedes its older one, clients take turns.

Every request names a client (the `dg.client` field; a request without one is its own client). A client has at
most one job waiting: a newer request replaces the waiting one in its place in the line, and cancels the client's
running job, which stops within one denoising step. Waiting clients are served in the order they joined the line,
one job each, so a client that keeps typing cannot starve another (round-robin at request granularity).

The engine fills one canvas at a time: `Engine.stream` holds one context's KV cache and a (1, C) canvas, with no
batched path across contexts, so jobs of different clients run one after another on the engine thread; the
scheduler keeps that thread busy with the newest work only.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.seam import CancelFlag, InfillBackend

log = logging.getLogger(__name__)

# What a job reports, in order: any number of ("step", draft), then exactly one of ("done", result),
# ("cancelled", why) or ("error", message).
Emit = Callable[[str, Any], None]


@dataclass(frozen=True)
class FillSpec:
    """The engine inputs of one request (checked against the service's limits before it is queued)."""

    context_ids: list[int]
    canvas_length: int
    max_canvases: int = 1
    steps: int | None = None
    entropy_bound: float | None = None
    seed: int = 0
    step_events: bool = False  # emit a ("step", draft) after every denoising step
    draft_text: bool = False  # decode each step's canvas to text (only when step events are on)
    init_ids: list[int] | None = None  # the seed canvas (engine.seam.InfillBackend.infill)
    start_noise: float = 1.0  # the seed's corruption level


class QueueFull(Exception):
    """More clients are waiting than the service admits."""


@dataclass(eq=False)  # identity: a job is one request
class Job:
    client: str
    spec: FillSpec
    token: CancelFlag
    emit: Emit = field(repr=False)
    id: int = 0
    queued_at: float = field(default_factory=time.perf_counter)
    started_at: float | None = None
    why: str | None = None  # why it was cancelled (first reason wins)
    steps: int = 0  # denoising steps done (written by the engine thread)
    steps_at_cancel: int | None = None

    def cancel(self, why: str) -> None:
        if self.why is None:
            self.why = why
            self.steps_at_cancel = self.steps
        self.token.cancel()

    def report(self, kind: str, payload: Any) -> None:
        try:
            self.emit(kind, payload)
        except RuntimeError:  # the request's event loop has closed: nobody is listening
            pass


class Scheduler:
    """Owns the engine thread. `submit` and `cancel` may be called from any thread."""

    def __init__(self, max_queue: int = 64) -> None:
        self.max_queue = max_queue
        self._cond = threading.Condition()
        self._pending: dict[str, Job] = {}  # insertion order is the line; one waiting job per client
        self._running: Job | None = None
        self._backend: InfillBackend | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._ids = itertools.count(1)
        self.counts = {"done": 0, "cancelled": 0, "superseded": 0, "error": 0}
        self.steps_after_cancel_max = 0  # the most denoising steps a running job did after its cancel

    def start(self, backend: InfillBackend) -> None:
        """Start serving with a loaded backend."""
        with self._cond:
            self._backend = backend
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="dg-service-engine", daemon=True)
                self._thread.start()

    def submit(self, client: str, spec: FillSpec, emit: Emit) -> Job:
        """Queue a job for `client`, superseding the client's waiting and running jobs."""
        with self._cond:
            if self._closed or self._backend is None:
                raise RuntimeError("the scheduler is not serving")
            old = self._pending.get(client)
            if old is None and len(self._pending) >= self.max_queue:
                raise QueueFull(f"{len(self._pending)} clients are waiting (the limit is {self.max_queue})")
            job = Job(client, spec, self._backend.new_cancel_token(), emit, id=next(self._ids))
            self._pending[client] = job  # an existing key keeps its place in the line
            if old is not None:
                old.cancel("superseded by a newer request from the same client")
                self.counts["superseded"] += 1
                old.report("cancelled", old.why)
            run = self._running
            if run is not None and run.client == client:
                run.cancel("superseded by a newer request from the same client")
            self._cond.notify()
            return job

    def cancel(self, job: Job, why: str) -> None:
        """Cancel a job: a waiting one leaves the line at once, a running one stops within one step."""
        with self._cond:
            if self._pending.get(job.client) is job:
                del self._pending[job.client]
                job.cancel(why)
                self.counts["cancelled"] += 1
                job.report("cancelled", job.why)
                return
        job.cancel(why)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            run = self._running
            return {"queue": len(self._pending), "running": 0 if run is None else 1, "requests": dict(self.counts),
                    "steps_after_cancel_max": self.steps_after_cancel_max}

    def stop(self) -> None:
        with self._cond:
            self._closed = True
            waiting, self._pending = list(self._pending.values()), {}
            if self._running is not None:
                self._running.cancel("the service is stopping")
            self._cond.notify_all()
        for job in waiting:
            job.cancel("the service is stopping")
            job.report("cancelled", job.why)

    def _count(self, kind: str) -> None:
        with self._cond:
            self.counts[kind] += 1

    # -- the engine thread ----------------------------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                client = next(iter(self._pending))
                job = self._running = self._pending.pop(client)
                backend = self._backend
            try:
                self._run(backend, job)
            finally:
                with self._cond:
                    self._running = None

    def _run(self, backend: Any, job: Job) -> None:
        if job.token.cancelled:  # cancelled between leaving the line and starting
            self._count("cancelled")
            job.report("cancelled", job.why or "cancelled")
            return
        spec = job.spec
        job.started_at = time.perf_counter()

        def on_step(draft: Any) -> None:
            job.steps += 1
            if spec.step_events:
                job.report("step", draft)

        try:
            res = backend.infill(spec.context_ids, canvas_length=spec.canvas_length, steps=spec.steps,
                                 entropy_bound=spec.entropy_bound, max_canvases=spec.max_canvases, seed=spec.seed,
                                 cancel=job.token, on_step=on_step, draft_text=spec.draft_text and spec.step_events,
                                 init_ids=spec.init_ids, start_noise=spec.start_noise)
        except Exception as exc:  # noqa: BLE001 -- one bad request must not stop the engine thread
            log.exception("fill %d of client %s failed", job.id, job.client)
            self._count("error")
            job.report("error", f"{type(exc).__name__}: {exc}")
            return
        if job.steps_at_cancel is not None:
            with self._cond:
                self.steps_after_cancel_max = max(self.steps_after_cancel_max, job.steps - job.steps_at_cancel)
        if res.cancelled:
            self._count("cancelled")
            job.report("cancelled", job.why or "cancelled")
        else:
            self._count("done")
            job.report("done", res)

