"""The seam's error channel through the fill pipeline: a backend that fails a fill (a remote server's error) gives
the reason "error" with its message, is never reported as a cancel, and is not kept in the LRU."""

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


async def fill(backend, caches: FillCaches, worker: Worker, kind: str = "keystroke"):
    snap = Document("file:///p.py", "python", 1, TEXT).snapshot()
    hole = hole_at_cursor(snap, TEXT.index("return ") + len("return "))
    policy = Policy(kind, steps=3, entropy_bound=None, context_tokens=256, drafts=False, encoding="utf-16")
    engine = worker.loaded  # the fill's one backend handle: the test's backend, as loaded
    assert engine is not None and engine.backend is backend
    return await run_fill(snap, hole, policy, engine, caches, worker=worker, request_id="r1", trace=Trace(0.0),
                          identity_of=lambda uri: (0, 1), events=FillEvents(draft=lambda body: None, busy=lambda: None))


@pytest.fixture
async def worker():
    w = Worker(lambda settings: None, check=None)
    yield w
    w.shutdown()


@pytest.mark.parametrize("kind", ["keystroke", "command"])
async def test_a_failed_fill_is_an_error_with_its_reason_not_a_cancel(worker, kind):
    backend = FakeBackend(error="http://gpu:8000/v1/completions failed: HTTP 500: Internal Server Error")
    caches = FillCaches()
    assert isinstance(backend, InfillBackend)
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, caches, worker, kind)
    assert out.fill is None and out.reason == "error" and "HTTP 500" in out.error
    wire = out.stats.wire()
    assert wire["reason"] == "error" and wire["cancelled"] is False and "HTTP 500" in wire["error"]
    again = await fill(backend, caches, worker, kind)  # a failure is not remembered: the next fill asks again
    assert again.reason == "error" and len(backend.calls) == 2


async def test_a_fill_that_works_has_no_error_on_the_wire(worker):
    backend = FakeBackend()
    worker.engine, worker.state = backend, "ready"
    out = await fill(backend, FillCaches(), worker)
    assert out.fill == "x + 1" and out.error is None and "error" not in out.stats.wire()
