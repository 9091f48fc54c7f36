"""The engine thread with the seam's test double (tests/seam_fakes.py): loading, latest-wins debounce,
cancellation within one step, one backend per fill across a reload."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from dg_lsp.config import Settings
from dg_lsp.fill.worker import EngineCalls, Loaded, Worker
from engine.seam_jobs import FillInputs
from tests.seam_fakes import FakeBackend


def slow_engine(step_s: float = 0.01) -> FakeBackend:
    """Fills "fill" in 8 steps (a job's `steps` when given) of `step_s` seconds, checking the cancel flag before each
    (as the real engine does)."""
    return FakeBackend("fill", steps=8, step_s=step_s, name="slow")


async def ready_worker(engine) -> Worker:
    w = Worker(lambda s: engine, check=None)
    await w.load(Settings())
    assert w.state == "ready" and w.engine is engine
    return w


async def test_load_failure_is_reported_not_raised():
    def broken(settings):
        raise FileNotFoundError("no such checkpoint")

    w = Worker(broken)
    await w.load(Settings(model_path="/nope"))
    assert w.state == "error" and "no such checkpoint" in w.error and w.engine is None
    w.shutdown()


async def test_engine_runs_off_the_loop_thread():
    eng = slow_engine(0.001)
    w = await ready_worker(eng)
    t = w.ticket("file:///a.py", "1", "keystroke", w.loaded, FillInputs([1, 2], 16, 4, None))
    res = await w.infill(t)
    assert res.steps == 4 and t.steps_done == 4
    assert eng.threads[0] is not threading.current_thread()
    w.shutdown()


async def test_debounce_latest_wins():
    w = Worker(lambda s: None)
    results = await asyncio.gather(*(w.debounce("u", 20) for _ in range(5)), w.debounce("other", 20))
    assert results == [False, False, False, False, True, True]
    w.shutdown()


@pytest.mark.parametrize("how", ["ticket", "document", "request", "task"])
async def test_cancel_stops_within_one_step(how):
    eng = slow_engine(0.01)
    w = await ready_worker(eng)
    seen = asyncio.Event()
    loop = asyncio.get_running_loop()
    t = w.ticket("file:///a.py", "7", "command", w.loaded, FillInputs([1], 16, 200, None),
                 on_step=lambda d: d.step == 3 and loop.call_soon_threadsafe(seen.set))
    task = asyncio.ensure_future(w.infill(t))
    await seen.wait()
    if how == "ticket":
        t.cancel("test")
    elif how == "document":
        assert w.cancel_document("file:///a.py", "newer edit") == 1
    elif how == "request":
        assert w.cancel_request("7")
    else:
        task.cancel()
    if how == "task":
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)  # the engine thread notices the token at its next step
    else:
        res = await task
        assert res.cancelled
    assert t.steps_at_cancel is not None and t.steps_after_cancel <= 1
    assert t.steps_done < 10
    w.shutdown()


async def test_new_inline_job_supersedes_inline_but_not_command():
    w = Worker(lambda s: None)
    on, inputs = Loaded(FakeBackend(), w.generation), FillInputs([1], 16)
    cmd = w.ticket("u", "1", "command", on, inputs)
    old = w.ticket("u", "2", "keystroke", on, inputs)
    other = w.ticket("v", "3", "keystroke", on, inputs)
    new = w.ticket("u", "4", "keystroke", on, inputs)
    assert old.token.cancelled and old.why_cancelled == "superseded"
    assert not cmd.token.cancelled and not other.token.cancelled and not new.token.cancelled
    w.shutdown()


async def test_job_cancelled_in_the_queue_never_reaches_the_engine():
    eng = slow_engine(0.01)
    w = await ready_worker(eng)
    first = w.ticket("u", "1", "command", w.loaded, FillInputs([1], 16, 10, None))
    second = w.ticket("u", "2", "command", w.loaded, FillInputs([1], 16, 10, None))
    a = asyncio.ensure_future(w.infill(first))
    b = asyncio.ensure_future(w.infill(second))
    second.cancel("test")
    assert (await a).steps == 10
    assert await b is None
    assert len(eng.calls) == 1
    w.shutdown()


async def test_engine_thread_runs_calls_in_order_and_hands_back_errors():
    th = EngineCalls()
    order: list[int] = []

    def call(i: int) -> int:
        time.sleep(0.005)
        order.append(i)
        if i == 2:
            raise ValueError("bad input")
        return i * 10

    runs = [th.submit(call, i) for i in range(4)]
    assert await runs[0].result == 0 and await runs[1].result == 10
    with pytest.raises(ValueError, match="bad input"):
        await runs[2].result
    assert await runs[3].result == 30 and order == [0, 1, 2, 3]
    assert threading.current_thread() is not th.thread
    th.shutdown()


async def test_engine_thread_finished_outlives_a_cancelled_result_and_shutdown_drops_the_queue():
    th = EngineCalls()
    gate = threading.Event()
    first = th.submit(gate.wait, 5)
    second = th.submit(lambda: "never")
    first.result.cancel()
    th.shutdown()
    gate.set()
    await asyncio.wait_for(first.finished, 5)  # the call ran to its end although nobody wanted its result
    with pytest.raises(RuntimeError, match="shut down"):
        await asyncio.wait_for(second.result, 5)
    with pytest.raises(RuntimeError, match="shut down"):
        th.submit(lambda: None)


async def test_a_fill_runs_on_the_backend_its_prompt_was_built_for_or_not_at_all():
    """A reload between a fill's prompt and its job: the job never reaches either backend, and is reported as
    cancelled by the reload (the prompt was laid out for the replaced backend)."""
    first, second = slow_engine(0.0), slow_engine(0.0)
    backends = iter([first, second])
    w = Worker(lambda s: next(backends), check=None)
    await w.load(Settings())
    engine = w.loaded  # what the pipeline builds the prompt with
    assert engine is not None and engine.backend is first
    await w.load(Settings())  # a settings change reloads meanwhile
    assert w.engine is second and first.closed
    t = w.ticket("u", "1", "keystroke", engine, FillInputs([1], 16, 4, None))
    assert await w.infill(t) is None
    assert t.why_cancelled == "model reload" and first.calls == [] and second.calls == []
    fresh = w.ticket("u", "2", "keystroke", w.loaded, FillInputs([1], 16, 4, None))
    assert (await w.infill(fresh)).steps == 4 and len(second.calls) == 1
    w.shutdown()


class NoFillEngine(FakeBackend):
    """Loads, but every fill fails (as a checkpoint whose tokenizer cannot encode would)."""

    def encode(self, text: str) -> list[int]:
        raise ValueError("this tokenizer cannot encode")


async def test_ready_only_after_a_check_fill():
    w = Worker(lambda s: NoFillEngine())
    await w.load(Settings())
    assert w.state == "error" and w.engine is None
    assert "check fill failed" in w.error and "cannot encode" in w.error
    w.shutdown()
    good = slow_engine(0.0)
    w = Worker(lambda s: good)
    await w.load(Settings())
    assert w.state == "ready" and len(good.calls) == 1  # the check fill ran once
    w.shutdown()
