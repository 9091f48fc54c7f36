"""The scheduling shape the server's worker and the engine service share (engine/seam_jobs.py), with the seam's test
double: the supersede rule, a job's cancel before and during its fill, its step counts, and an engine thread that
outlives a failing piece of work."""

from __future__ import annotations

import queue
import threading

from engine.seam_jobs import EngineThread, FillInputs, FillJob, Jobs
from tests.seam_fakes import FakeBackend


def job(backend: FakeBackend, key: str | None = None, **inputs: object) -> FillJob:
    return FillJob(backend, FillInputs([1, 2, 3], 16, **inputs), key=key)  # type: ignore[arg-type]


def test_a_new_job_supersedes_the_older_jobs_with_its_key_only():
    b = FakeBackend()
    jobs: Jobs[FillJob] = Jobs()
    a1, other, free = job(b, "a"), job(b, "b"), job(b, None)
    for j in (a1, other, free):
        assert jobs.add(j) == []
    a2 = job(b, "a")
    assert jobs.add(a2, "newer") == [a1]
    assert a1.cancelled and a1.why_cancelled == "newer"
    assert not (other.cancelled or free.cancelled or a2.cancelled)
    assert jobs.add(job(b, None)) == []  # a job without a key supersedes nothing, and is never superseded
    jobs.discard(a2)  # finished: a later job with its key has nothing to cancel (a1 was cancelled already)
    a3 = job(b, "a")
    assert jobs.add(a3) == [] and not a2.cancelled
    assert jobs.cancel(lambda j: j.key == "b", "gone") == [other] and other.why_cancelled == "gone"
    assert len(jobs) == 5  # a1, other, free, the keyless one, a3: each leaves when its owner discards it


def test_the_fill_runs_with_its_inputs_and_counts_its_steps():
    b = FakeBackend("abc", steps=5)
    j = job(b, steps=4, draft_text=True)
    seen: list[str] = []
    j.on_step = lambda d: seen.append(d.text)
    res = j.run()
    assert res is not None and res.text == "abc" and res.steps == 4
    assert j.steps_done == 4 and seen == ["a", "ab", "abc", "abc"]
    assert j.started_at is not None and j.finished_at is not None and j.steps_after_cancel is None
    assert b.calls == [[1, 2, 3]]


def test_a_job_cancelled_before_it_starts_never_reaches_the_backend():
    b = FakeBackend()
    j = job(b)
    j.cancel("first")
    j.cancel("second")  # the first reason is the one kept
    assert j.run() is None and b.calls == [] and j.why_cancelled == "first" and j.steps_after_cancel == 0


def test_a_cancel_mid_fill_stops_it_within_one_step():
    b = FakeBackend(steps=200)
    j = job(b)
    j.on_step = lambda d: d.step == 3 and j.cancel("newer keystroke")
    res = j.run()
    assert res is not None and res.cancelled
    assert j.steps_at_cancel == 3 and j.steps_after_cancel is not None and j.steps_after_cancel <= 1


def test_the_engine_thread_runs_work_in_its_lines_order_and_outlives_a_failure():
    line: queue.SimpleQueue = queue.SimpleQueue()
    done: list[int] = []

    def fail() -> None:
        raise ValueError("bad work")

    th = EngineThread(line.get, "test-engine")
    for work in (lambda: done.append(1), fail, lambda: done.append(threading.current_thread() is th.thread), None):
        line.put(work)
    assert th.join(0) is True  # never started
    th.start()
    th.start()  # once only
    assert th.join(5) and done == [1, True]
