"""One request's timeline: when the keystroke behind it arrived, the span of each stage it went through, when its
answer went out.

The stages are timed around the logic, as `tracing` spans are in ruff's server and llm-ls: `with trace.span("prompt"):`
records when the block started and ended, and nothing inside it knows. A stage that raised has no span. Once the
answer is written, `Trace.figures` turns the spans into what dg/status reports and bench.lsp_latency reads
(docs/PROTOCOL.md): `respondedMs`, `waitMs`, `writeMs` and `stagesMs`; dg_lsp.fill.pipeline reads the fill's own
figures (`canvasMs`, `engineWallMs`, `postMs`, `totalMs`) from the same spans (`Trace.ms`).

Spans (all `time.perf_counter()` values on the event loop unless said otherwise):
    handler        the request's task started (its didChange handled, the request read and dispatched): an instant
    fill           the fill pipeline, from its call (snapshot, cursor, typed-ahead check, debounce, hole: done) to
                   its outcome
    prompt         the prompt built (context from other files, tokenized, budgeted, laid out)
    engine         the loop awaiting the engine job, from the call to the result back on the loop
    engine_thread  the engine thread running the job (the engine thread's own clock)
    post           the answer read back and post-processed (with the syntax gate)
The answer's hand-off to the OS (`out`, dg_lsp.wire.stdio.TimedWriter) is given to `figures`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType

# stagesMs keys, in order (the wire names of docs/PROTOCOL.md; "canvas" is the prompt's stage there)
STAGES = ("input", "hole", "canvas", "toEngine", "engineGlue", "fromEngine", "post", "answer")


def _ms(a: float, b: float) -> float:
    return round((b - a) * 1e3, 3)


class Span:
    """One stage's timing as a context manager (a slotted class: cheaper on the keystroke path than a generator)."""

    __slots__ = ("_spans", "_name", "_start")

    def __init__(self, spans: dict[str, tuple[float, float]], name: str) -> None:
        self._spans, self._name, self._start = spans, name, 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self._spans[self._name] = (self._start, time.perf_counter())


@dataclass
class Trace:
    """The spans of one request: name -> (start, end). `wait_s`: how long the server sat idle, the keystroke's
    didChange handled, until the request came (the client's time, not the server's)."""

    arrived: float
    wait_s: float = 0.0
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)

    def span(self, name: str) -> Span:
        """`with trace.span(name):` times the block as stage `name` (recorded when it ends; not when it raises)."""
        return Span(self.spans, name)

    def record(self, name: str, start: float, end: float) -> None:
        """A span timed elsewhere (the engine thread's own perf_counter() values)."""
        self.spans[name] = (start, end)

    def mark(self, name: str) -> float:
        """An instant: a span of no length that starts now (a request's task starting: "handler")."""
        now = time.perf_counter()
        self.spans[name] = (now, now)
        return now

    def ms(self, name: str) -> float | None:
        """How long stage `name` took (ms); None when the request did not go through it."""
        span = self.spans.get(name)
        return None if span is None else _ms(*span)

    def stages_ms(self, out: float, engine_ms: float) -> dict[str, float]:
        """Where the server's own time went (ms), contiguous from the arrival to `out`, the engine's own time
        (`engine_ms`, the FillResult's) and the idle wait for the request left out. Stages a request did not go
        through are absent."""
        s = self.spans
        fill_start, fill_end = s["fill"]
        handler = s["handler"][0] if "handler" in s else fill_start
        prompt = s["prompt"][1]
        stages = {"input": round(_ms(self.arrived, handler) - self.wait_s * 1e3, 3),
                  "hole": _ms(handler, fill_start),
                  "canvas": _ms(fill_start, prompt)}
        back = s["engine"][1] if "engine" in s else prompt  # the result back on the loop
        if "engine_thread" in s and "engine" in s:
            started, finished = s["engine_thread"]
            stages["toEngine"] = _ms(prompt, started)
            stages["engineGlue"] = round(_ms(started, finished) - engine_ms, 3)
            stages["fromEngine"] = _ms(finished, back)
        if "post" in s:
            stages["post"] = _ms(back, s["post"][1])
        stages["answer"] = _ms(s["post"][1] if "post" in s else fill_end, out)
        return stages

    def figures(self, out: float, now: float, engine_ms: float) -> dict[str, object]:
        """dg/status's timing fields once the answer was handed to the OS at `out` (its write returned at `now`)."""
        body: dict[str, object] = {"respondedMs": _ms(self.arrived, out), "waitMs": round(self.wait_s * 1e3, 3),
                                   "writeMs": _ms(out, now)}
        if "fill" in self.spans and "prompt" in self.spans:
            body["stagesMs"] = self.stages_ms(out, engine_ms)
        return body
