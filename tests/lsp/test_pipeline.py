"""The fill pipeline as a function: snapshot + hole + policy + backend + caches -> FillOutcome, with the seam's test
double (tests/seam_fakes.py: no model, no server)."""

from __future__ import annotations

import pytest

from dg_lsp.documents import Document
from dg_lsp.fill.cache import FillCaches
from dg_lsp.fill.holes import hole_at_cursor
from dg_lsp.fill.pipeline import FillEvents, Policy, run_fill
from dg_lsp.fill.worker import Worker
from dg_lsp.trace import Trace
from engine.seam import InfillBackend
from tests.seam_fakes import FakeBackend

TEXT = "def f(a):\n    return \n"


async def fill(backend: FakeBackend, caches: FillCaches, worker: Worker, store_version: list[int], drafts: list,
               kind: str = "keystroke", min_confidence: float = 0.0, force: bool = False, trace: Trace | None = None):
    doc = Document("file:///p.py", "python", 1, TEXT)
    snap = doc.snapshot()
    hole = hole_at_cursor(snap, TEXT.index("return ") + len("return "))
    policy = Policy(kind, steps=3, entropy_bound=None, context_tokens=256, drafts=True, encoding="utf-16",
                    min_confidence=min_confidence, force=force)
    events = FillEvents(draft=drafts.append, busy=lambda: None)
    engine = worker.loaded  # the fill's one backend handle: the test's backend, as loaded
    assert engine is not None and engine.backend is backend
    return await run_fill(snap, hole, policy, engine, caches, worker=worker, request_id="r1",
                          trace=trace or Trace(0.0), identity_of=lambda uri: (0, store_version[0]), events=events)


@pytest.fixture
async def worker():
    w = Worker(lambda settings: None, check=None)
    yield w
    w.shutdown()


async def test_a_fill_then_the_same_fill_from_the_lru(worker):
    backend, caches, drafts = FakeBackend(), FillCaches(), []
    assert isinstance(backend, InfillBackend)
    worker.engine, worker.state = backend, "ready"
    first = await fill(backend, caches, worker, [1], drafts)
    assert first.fill == "x + 1"
    assert first.reason is None and first.stats.cached is False and first.stats.steps == 3
    assert [d["step"] for d in drafts] == [1, 2, 3, 3] and drafts[-1]["done"]  # every step, then the final one
    again = await fill(backend, caches, worker, [1], drafts)
    assert again.fill == first.fill and again.stats.cached == "lru" and len(backend.calls) == 1
    wire = again.stats.wire()
    assert wire["cached"] == "lru" and wire["canvasLength"] == 32 and "engineWallMs" not in wire


async def test_a_fill_for_a_document_that_moved_on_is_dropped(worker):
    backend = FakeBackend()
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker, [2], [])
    assert out.fill is None and out.reason == "document changed"


async def test_a_fill_the_syntax_gate_rejects_is_an_empty_fill(worker):
    backend = FakeBackend(text=")))")
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker, [1], [], kind="command")
    assert out.fill is None and out.reason == "empty fill" and out.stats.post_ms is not None


@pytest.mark.parametrize("gate, shown", [(0.49, True), (0.5, True), (0.51, False)])
async def test_the_confidence_gate_at_its_boundary(worker, gate, shown):
    """A fill of confidence 0.5 is shown at a gate of 0.49 and 0.5 and withheld just above it."""
    backend = FakeBackend(confidence=0.5)
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker, [1], [], min_confidence=gate)
    assert (out.fill == "x + 1") is shown and out.confidence == 0.5
    assert out.reason == (None if shown else "low confidence") and out.withheld == (None if shown else "x + 1")
    wire = out.stats.wire()
    assert wire["confidence"] == 0.5 and wire["minConfidence"] == gate and wire["reason"] == out.reason


async def test_force_applies_a_withheld_fill_and_the_lru_keeps_its_confidence(worker):
    backend, caches = FakeBackend(confidence=0.2), FillCaches()
    worker.engine, worker.state = backend, "ready"
    held = await fill(backend, caches, worker, [1], [], kind="command", min_confidence=0.9)
    assert held.fill is None and held.withheld == "x + 1"
    forced = await fill(backend, caches, worker, [1], [], kind="command", min_confidence=0.9, force=True)
    assert forced.fill == "x + 1" and forced.stats.cached == "lru" and forced.confidence == 0.2
    assert len(backend.calls) == 1


async def test_an_unknown_confidence_is_never_gated(worker):
    """A server that returns no probabilities (an OpenAI-compatible one without logprobs): shown, reported null."""
    backend = FakeBackend(confidence=None)
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker, [1], [], min_confidence=0.99)
    assert out.fill == "x + 1" and out.stats.wire()["confidence"] is None


async def test_the_figures_are_the_stages_spans_and_the_engines_result(worker):
    """Each stage the fill went through has its span on the request's trace, and the figures are read from them."""
    backend, caches = FakeBackend(), FillCaches()
    worker.engine, worker.state = backend, "ready"
    trace = Trace(0.0)
    out = await fill(backend, caches, worker, [1], [], trace=trace)
    assert {"fill", "prompt", "engine", "engine_thread", "post"} <= set(trace.spans)
    s = out.stats
    assert (s.total_ms, s.prompt_ms, s.engine_wall_ms, s.post_ms) == tuple(
        trace.ms(name) for name in ("fill", "prompt", "engine", "post"))
    assert s.engine_ms == 1.0 and s.server_ms == round(s.total_ms - s.engine_ms, 3)
    cached = Trace(0.0)
    await fill(backend, caches, worker, [1], [], trace=cached)
    assert "engine" not in cached.spans and "engine_thread" not in cached.spans and "post" in cached.spans
