"""One request's timeline: when the keystroke behind it arrived, when each stage ended, when its answer went out.

Handlers and the fill pipeline call `Trace.mark(stage)` as a request goes through its stages (as `tracing` spans
do in ruff's server); nothing else in the code keeps time. Once the answer is written, `Trace.figures` turns the
marks into what dg/status reports and bench.lsp_latency reads (docs/PROTOCOL.md): `respondedMs`, `waitMs`,
`writeMs` and `stagesMs`.

Stages (marks, all `time.perf_counter()` values on the event loop unless said otherwise):
    arrived           the keystroke's didChange arrived (else the request itself), before it was parsed
    handler           the request's task started (its didChange handled, the request read and dispatched)
    fill              the fill pipeline started (snapshot, cursor, typed-ahead check, debounce, hole: done)
    prompt            the prompt was built (tokenized, budgeted)
    engine_started    the engine thread started the job (set from the engine thread's own clock)
    engine_finished   the engine thread finished it
    resumed           the loop had the result back
    post              post-processing (with the syntax gate) done
    filled            the pipeline returned
    out               the answer was handed to the OS (see dg_lsp.stdio.TimedWriter)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# stagesMs keys, in order (the wire names of docs/PROTOCOL.md; "canvas" is the prompt's stage there)
STAGES = ("input", "hole", "canvas", "toEngine", "engineGlue", "fromEngine", "post", "answer")


def _ms(a: float, b: float) -> float:
    return round((b - a) * 1e3, 3)


@dataclass
class Trace:
    """The marks of one request. `wait_s`: how long the server sat idle, the keystroke's didChange handled, until
    the request came (the client's time, not the server's)."""

    arrived: float
    wait_s: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, stage: str, at: float | None = None) -> float:
        """Record that `stage` ended now (or at `at`, a perf_counter() value taken on another thread)."""
        self.marks[stage] = time.perf_counter() if at is None else at
        return self.marks[stage]

    def ms(self, start: str, end: str) -> float:
        return _ms(self.marks[start], self.marks[end])

    def stages_ms(self, out: float, engine_ms: float) -> dict[str, float]:
        """Where the server's own time went (ms), contiguous from the arrival to `out`, the engine's own time and
        the idle wait for the request left out. Stages a request did not go through are absent."""
        m = self.marks
        handler = m.get("handler", m["fill"])
        stages = {"input": round(_ms(self.arrived, handler) - self.wait_s * 1e3, 3),
                  "hole": _ms(handler, m["fill"]),
                  "canvas": _ms(m["fill"], m["prompt"])}
        if "engine_started" in m:
            stages["toEngine"] = _ms(m["prompt"], m["engine_started"])
            stages["engineGlue"] = round(_ms(m["engine_started"], m["engine_finished"]) - engine_ms, 3)
            stages["fromEngine"] = _ms(m["engine_finished"], m["resumed"])
        if "post" in m:
            stages["post"] = _ms(m.get("resumed", m["prompt"]), m["post"])
        stages["answer"] = _ms(m.get("post", m["filled"]), out)
        return stages

    def figures(self, out: float, now: float, engine_ms: float) -> dict[str, object]:
        """dg/status's timing fields once the answer was handed to the OS at `out` (its write returned at `now`)."""
        body: dict[str, object] = {"respondedMs": _ms(self.arrived, out), "waitMs": round(self.wait_s * 1e3, 3),
                                   "writeMs": _ms(out, now)}
        if "fill" in self.marks and "prompt" in self.marks and "filled" in self.marks:
            body["stagesMs"] = self.stages_ms(out, engine_ms)
        return body
