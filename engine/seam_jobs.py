"""One engine thread, one fill at a time: the scheduling shape the language server's worker (dg_lsp.fill.worker) and the
engine service's scheduler (engine.service.scheduler) share.

Each owns one `EngineThread`, which runs the work its owner's line hands out one piece at a time (the server: calls
in the order submitted; the service: one waiting fill per client, clients in turn), and one `Jobs`, the fills
not yet finished with the one supersede rule: a new job cancels the older jobs with its key. A fill is a
`FillJob`: the backend it runs on, its `FillInputs`, its cancel flag and its step counts. Cancellation is
cooperative: the backend checks the job's flag before every denoising step, so a cancelled job stops within one
step and frees the thread for the next one, and a job cancelled before it started never reaches the backend.

What stays with each owner is what only it has: the server's debounce, its document / request keys and its
asyncio hand-off; the service's HTTP requests, its per-client line and its event stream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from engine.seam import CancelFlag, FillResult, InfillBackend, StepDraft

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FillInputs:
    """The inputs of one fill: the arguments of `InfillBackend.infill` (same names, same order, same defaults) but
    its cancel flag and step listener, which the `FillJob` holds."""

    context_ids: list[int]
    canvas_length: int
    steps: int | None = None
    entropy_bound: float | None = None
    max_canvases: int = 1
    seed: int = 0
    draft_text: bool = False  # decode each step's canvas to text (only a listener that shows drafts needs it)
    init_ids: list[int] | None = None  # the seed canvas; None: from noise
    start_noise: float = 1.0  # the seed's corruption level


@dataclass(eq=False)  # identity: jobs live in sets and lines
class FillJob:
    """One fill as a scheduler sees it: the backend it runs on (that one, whatever its owner loads meanwhile), its
    inputs, its cancel flag (the backend's own kind), the key a newer job supersedes it by (None: never), and its
    step counts.

    `steps_done` and the times are written by the engine thread and read by other threads: ints and floats are
    written atomically in CPython, and the figures are measurements, not a synchronisation device."""

    backend: InfillBackend
    inputs: FillInputs
    key: Hashable | None = None
    on_step: Callable[[StepDraft], None] | None = field(default=None, repr=False)  # engine thread, after each step
    token: CancelFlag = field(init=False, repr=False)
    steps_done: int = 0
    steps_at_cancel: int | None = None  # steps_done when the first cancel came
    why_cancelled: str | None = None  # the first cancel's reason
    started_at: float | None = None  # perf_counter() on the engine thread when the fill started / returned
    finished_at: float | None = None

    def __post_init__(self) -> None:
        self.token = self.backend.new_cancel_token()

    def cancel(self, why: str) -> None:
        """Any thread: stop the fill within one step (the first reason is the one kept)."""
        if self.steps_at_cancel is None:
            self.steps_at_cancel = self.steps_done
            self.why_cancelled = why
        self.token.cancel()

    @property
    def cancelled(self) -> bool:
        return self.token.cancelled

    @property
    def steps_after_cancel(self) -> int | None:
        """Denoising steps that ran after the cancel (at most 1 for a backend that checks its flag every step)."""
        return None if self.steps_at_cancel is None else self.steps_done - self.steps_at_cancel

    def run(self) -> FillResult | None:
        """Engine thread: the fill on the job's backend; None when it was cancelled before it started (the backend
        never saw it). Raises what the backend raises."""
        if self.token.cancelled:
            return None
        listener = self.on_step

        def on_step(draft: StepDraft) -> None:
            self.steps_done += 1
            if listener is not None:
                listener(draft)

        i = self.inputs
        self.started_at = time.perf_counter()
        try:
            return self.backend.infill(i.context_ids, canvas_length=i.canvas_length, steps=i.steps,
                                       entropy_bound=i.entropy_bound, max_canvases=i.max_canvases, seed=i.seed,
                                       cancel=self.token, on_step=on_step, draft_text=i.draft_text,
                                       init_ids=i.init_ids, start_noise=i.start_noise)
        finally:
            self.finished_at = time.perf_counter()


J = TypeVar("J", bound=FillJob)


class Jobs(Generic[J]):
    """The jobs of one scheduler that have not finished, and the supersede rule: a job added with a key cancels the
    jobs already here with that key. Not locked: its owner calls it from one thread, or under its own lock."""

    def __init__(self) -> None:
        self._live: dict[J, None] = {}  # insertion order: oldest first

    def add(self, job: J, why: str = "superseded") -> list[J]:
        """Add `job`; cancel (with `why`) and return the jobs it supersedes (those with its key not cancelled yet)."""
        older = [] if job.key is None else [j for j in self._live if j.key == job.key and not j.cancelled]
        for j in older:
            j.cancel(why)
        self._live[job] = None
        return older

    def discard(self, job: J) -> None:
        """`job` has finished (or left): it supersedes and is cancelled no more."""
        self._live.pop(job, None)

    def cancel(self, which: Callable[[J], bool], why: str) -> list[J]:
        """Cancel the jobs `which` picks; returns them."""
        hits = [j for j in self._live if which(j)]
        for j in hits:
            j.cancel(why)
        return hits

    def __iter__(self) -> Iterator[J]:
        return iter(list(self._live))

    def __len__(self) -> int:
        return len(self._live)


Work = Callable[[], None]


class EngineThread:
    """One daemon thread that runs one piece of work at a time, each as `take` hands it out, until `take` returns
    None. `take` blocks until there is work (its owner's line decides the order); a piece of work that raises is
    logged and the next one runs. Started by `start` (or lazily by the owner on first use)."""

    def __init__(self, take: Callable[[], Work | None], name: str,
                 on_start: Callable[[], object] | None = None) -> None:
        self._take = take
        self._on_start = on_start  # run first on the thread (dg_lsp.sched.short_slice for the server)
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread.ident is None:
                self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def join(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the thread to end (its owner has made `take` return None); True once it has,
        or when it never started."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _serve(self) -> None:
        if self._on_start is not None:
            self._on_start()
        while (work := self._take()) is not None:
            try:
                work()
            except Exception:  # an owner's work answers its own errors; this only keeps the thread alive
                log.exception("engine work failed")
