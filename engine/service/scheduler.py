"""The service's scheduler: one engine thread, a client's newer request supersedes its older one, clients take turns.

Every request names a client (the `dg.client` field; a request without one is its own client). A client has at
most one job waiting: a newer request replaces the waiting one in its place in the line, and cancels the client's
running job, which stops within one denoising step. Waiting clients are served in the order they joined the line,
one job each, so a client that keeps typing cannot starve another (round-robin at request granularity).

The engine thread, the job, its inputs and the supersede rule (a job supersedes the jobs with its key: here, its
client) are the shape the language server's worker shares (engine/seam_jobs.py); this module adds the per-client
line, the event stream a request reads and the counts /health reports.

The engine fills one canvas at a time: `Engine.stream` holds one context's KV cache and a (1, C) canvas, with no
batched path across contexts, so jobs of different clients run one after another on the engine thread; the
scheduler keeps that thread busy with the newest work only.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.seam import InfillBackend
from engine.seam_jobs import EngineThread, FillInputs, FillJob, Jobs

log = logging.getLogger(__name__)

# What a job reports, in order: any number of ("step", draft), then exactly one of ("done", result),
# ("cancelled", why) or ("error", message).
Emit = Callable[[str, Any], None]

SUPERSEDED = "superseded by a newer request from the same client"


class QueueFull(Exception):
    """More clients are waiting than the service admits."""


@dataclass(eq=False, kw_only=True)  # identity: a job is one request
class Job(FillJob):
    """One request's fill (engine.seam_jobs.FillJob, its key the client) and where its events go."""

    client: str
    emit: Emit = field(repr=False)
    id: int = 0
    queued_at: float = field(default_factory=time.perf_counter)

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
        self._jobs: Jobs[Job] = Jobs()  # waiting and running: what a newer request of the client supersedes
        self._running: Job | None = None
        self._backend: InfillBackend | None = None
        self._thread = EngineThread(self._take, "dg-service-engine")
        self._closed = False
        self._ids = itertools.count(1)
        self.counts = {"done": 0, "cancelled": 0, "superseded": 0, "error": 0}
        self.steps_after_cancel_max = 0  # the most denoising steps a running job did after its cancel

    def start(self, backend: InfillBackend) -> None:
        """Start serving with a loaded backend."""
        with self._cond:
            self._backend = backend
        self._thread.start()

    def submit(self, client: str, inputs: FillInputs, emit: Emit, step_events: bool = False) -> Job:
        """Queue a job for `client`, superseding the client's waiting and running jobs; `step_events`: emit a
        ("step", draft) after every denoising step."""
        with self._cond:
            if self._closed or self._backend is None:
                raise RuntimeError("the scheduler is not serving")
            old = self._pending.get(client)
            if old is None and len(self._pending) >= self.max_queue:
                raise QueueFull(f"{len(self._pending)} clients are waiting (the limit is {self.max_queue})")
            job = Job(self._backend, inputs, key=client, client=client, emit=emit, id=next(self._ids))
            if step_events:
                job.on_step = functools.partial(job.report, "step")
            self._pending[client] = job  # an existing key keeps its place in the line
            for gone in self._jobs.add(job, SUPERSEDED):
                if gone is old:  # it was waiting: it leaves the line now; a running one reports when it stops
                    self._jobs.discard(gone)
                    self.counts["superseded"] += 1
                    gone.report("cancelled", gone.why_cancelled)
            self._cond.notify()
            return job

    def cancel(self, job: Job, why: str) -> None:
        """Cancel a job: a waiting one leaves the line at once, a running one stops within one step."""
        with self._cond:
            if self._pending.get(job.client) is job:
                del self._pending[job.client]
                self._jobs.discard(job)
                job.cancel(why)
                self.counts["cancelled"] += 1
                job.report("cancelled", job.why_cancelled)
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
            self._jobs.cancel(lambda j: True, "the service is stopping")
            self._cond.notify_all()
        for job in waiting:
            job.report("cancelled", job.why_cancelled)

    def _count(self, kind: str) -> None:
        with self._cond:
            self.counts[kind] += 1

    # -- the engine thread ----------------------------------------------------------------------------------------
    def _take(self) -> Callable[[], None] | None:
        """The next client's waiting job, in line order (None: the service is stopping)."""
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            job = self._running = self._pending.pop(next(iter(self._pending)))
        return functools.partial(self._run, job)

    def _run(self, job: Job) -> None:
        try:
            self._fill(job)
        finally:
            with self._cond:
                self._running = None
                self._jobs.discard(job)

    def _fill(self, job: Job) -> None:
        try:
            res = job.run()
        except Exception as exc:  # noqa: BLE001 -- one bad request must not stop the engine thread
            log.exception("fill %d of client %s failed", job.id, job.client)
            self._count("error")
            job.report("error", f"{type(exc).__name__}: {exc}")
            return
        if job.steps_after_cancel is not None:
            with self._cond:
                self.steps_after_cancel_max = max(self.steps_after_cancel_max, job.steps_after_cancel)
        if res is None or res.cancelled:  # None: cancelled between leaving the line and starting
            self._count("cancelled")
            job.report("cancelled", job.why_cancelled or "cancelled")
        else:
            self._count("done")
            job.report("done", res)
