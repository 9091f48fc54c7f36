"""The fill pipeline as a function: snapshot + hole + policy + backend + caches -> FillOutcome, with a backend
double that satisfies engine.seam.InfillBackend (no model, no server)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dg_lsp.cache import FillCaches
from dg_lsp.documents import Document
from dg_lsp.holes import hole_at_cursor
from dg_lsp.pipeline import FillEvents, Policy, run_fill
from dg_lsp.trace import Trace
from dg_lsp.worker import Worker
from engine.seam import CancelToken, InfillBackend
from engine.tokens import InfillFormat


@dataclass
class Result:
    text: str
    steps: int
    cancelled: bool = False
    reused_prefix_tokens: int = 0
    timings: dict = field(default_factory=lambda: {"total_ms": 2.0})
    confidence: float | None = None
    error: str | None = None


@dataclass
class Step:
    step: int
    steps: int
    text: str


class Backend:
    """Answers every fill with `text` after `steps` steps; counts its calls."""

    model_name = "fake"
    prompt_format = InfillFormat(canvas_lengths=(16, 32, 64))
    splits_before_newline = False
    drafts = True

    def __init__(self, text: str = "x + 1", steps: int = 3, confidence: float | None = None) -> None:
        self.text, self.steps, self.calls, self.confidence = text, steps, 0, confidence

    def encode(self, text: str) -> list[int]:
        return [6 + b % 200 for b in text.encode()]

    def new_cancel_token(self) -> CancelToken:
        return CancelToken()

    def settings_in_force(self) -> dict:
        return {}

    def infill(self, context_ids, *, canvas_length, steps=None, entropy_bound=None, max_canvases=1, seed=0,
               cancel=None, on_step=None, draft_text=False, init_ids=None, start_noise=1.0) -> Result:
        self.calls += 1
        for i in range(1, self.steps + 1):
            if on_step is not None:
                on_step(Step(i, self.steps, self.text[:i] if draft_text else ""))
        return Result(self.text, self.steps, confidence=self.confidence)


TEXT = "def f(a):\n    return \n"


async def fill(backend: Backend, caches: FillCaches, worker: Worker, store_version: list[int], drafts: list,
               kind: str = "keystroke", min_confidence: float = 0.0, force: bool = False):
    doc = Document("file:///p.py", "python", 1, TEXT)
    snap = doc.snapshot()
    hole = hole_at_cursor(snap, TEXT.index("return ") + len("return "))
    policy = Policy(kind, steps=3, entropy_bound=None, context_tokens=256, drafts=True, encoding="utf-16",
                    min_confidence=min_confidence, force=force)
    events = FillEvents(draft=drafts.append, busy=lambda: None)
    return await run_fill(snap, hole, policy, backend, caches, worker=worker, request_id="r1", trace=Trace(0.0),
                          identity_of=lambda uri: (0, store_version[0]), events=events)


@pytest.fixture
async def worker():
    w = Worker(lambda settings: None, check=None)
    yield w
    w.shutdown()


async def test_a_fill_then_the_same_fill_from_the_lru(worker):
    backend, caches, drafts = Backend(), FillCaches(), []
    assert isinstance(backend, InfillBackend)
    worker.engine, worker.state = backend, "ready"
    first = await fill(backend, caches, worker, [1], drafts)
    assert first.fill == "x + 1"
    assert first.reason is None and first.stats.cached is False and first.stats.steps == 3
    assert [d["step"] for d in drafts] == [1, 2, 3, 3] and drafts[-1]["done"]  # every step, then the final one
    again = await fill(backend, caches, worker, [1], drafts)
    assert again.fill == first.fill and again.stats.cached == "lru" and backend.calls == 1
    wire = again.stats.wire()
    assert wire["cached"] == "lru" and wire["canvasLength"] == 32 and "engineWallMs" not in wire


async def test_a_fill_for_a_document_that_moved_on_is_dropped(worker):
    backend = Backend()
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker, [2], [])
    assert out.fill is None and out.reason == "document changed"


async def test_a_fill_the_syntax_gate_rejects_is_an_empty_fill(worker):
    backend = Backend(text=")))")
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker, [1], [], kind="command")
    assert out.fill is None and out.reason == "empty fill" and out.stats.post_ms is not None


@pytest.mark.parametrize("gate, shown", [(0.49, True), (0.5, True), (0.51, False)])
async def test_the_confidence_gate_at_its_boundary(worker, gate, shown):
    """A fill of confidence 0.5 is shown at a gate of 0.49 and 0.5 and withheld just above it."""
    backend = Backend(confidence=0.5)
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker, [1], [], min_confidence=gate)
    assert (out.fill == "x + 1") is shown and out.confidence == 0.5
    assert out.reason == (None if shown else "low confidence") and out.withheld == (None if shown else "x + 1")
    wire = out.stats.wire()
    assert wire["confidence"] == 0.5 and wire["minConfidence"] == gate and wire["reason"] == out.reason


async def test_force_applies_a_withheld_fill_and_the_lru_keeps_its_confidence(worker):
    backend, caches = Backend(confidence=0.2), FillCaches()
    worker.engine, worker.state = backend, "ready"
    held = await fill(backend, caches, worker, [1], [], kind="command", min_confidence=0.9)
    assert held.fill is None and held.withheld == "x + 1"
    forced = await fill(backend, caches, worker, [1], [], kind="command", min_confidence=0.9, force=True)
    assert forced.fill == "x + 1" and forced.stats.cached == "lru" and forced.confidence == 0.2
    assert backend.calls == 1


async def test_an_unknown_confidence_is_never_gated(worker):
    """A server that returns no probabilities (an OpenAI-compatible one without logprobs): shown, reported null."""
    backend = Backend(confidence=None)
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker, [1], [], min_confidence=0.99)
    assert out.fill == "x + 1" and out.stats.wire()["confidence"] is None
