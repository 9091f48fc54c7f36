"""The service's scheduler with a fake engine: each client's newest request wins, clients take turns, a cancel
touches only its own job, and a failing fill does not stop the engine thread."""

from __future__ import annotations

import threading

import pytest
from service_fakes import FakeBackend

from engine.seam_jobs import FillInputs
from engine.service.scheduler import QueueFull, Scheduler


class Outcome:
    """Collects one job's events (they arrive on the engine thread)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.done = threading.Event()

    def __call__(self, kind: str, payload: object) -> None:
        self.events.append((kind, payload))
        if kind != "step":
            self.done.set()

    def final(self) -> tuple[str, object]:
        assert self.done.wait(10), "the job never finished"
        return self.events[-1]


def spec(n: int, **kw) -> FillInputs:
    """A job whose context has n tokens (the fake's fill then says "filled:n")."""
    return FillInputs(context_ids=[5] * n, canvas_length=8, **kw)


@pytest.fixture
def held():
    """A scheduler whose fake engine holds every fill until the test opens the gate."""
    backend = FakeBackend()
    backend.gate = threading.Event()
    sched = Scheduler(max_queue=3)
    sched.start(backend)
    yield sched, backend
    backend.gate.set()
    sched.stop()


def test_a_newer_request_supersedes_the_clients_waiting_one_in_its_place(held):
    sched, backend = held
    first = Outcome()
    sched.submit("x", spec(1), first)  # runs, held at its first step
    assert backend.started.wait(5)
    a_old, b, c, a_new = Outcome(), Outcome(), Outcome(), Outcome()
    sched.submit("a", spec(2), a_old)
    sched.submit("b", spec(3), b)
    sched.submit("c", spec(4), c)
    sched.submit("a", spec(5), a_new)
    kind, why = a_old.final()  # answered at once, not after the engine is free
    assert kind == "cancelled" and "superseded" in why
    backend.gate.set()
    for o in (first, b, c, a_new):
        assert o.final()[0] == "done"
    # a kept its place in the line (before b and c), with its newer request; the superseded one never ran
    assert [len(ids) for ids in backend.calls] == [1, 5, 3, 4]


def test_a_newer_request_cancels_the_clients_running_fill(held):
    sched, backend = held
    old, new = Outcome(), Outcome()
    sched.submit("a", spec(1), old, step_events=True)
    assert backend.started.wait(5)
    sched.submit("a", spec(2), new)
    backend.gate.set()
    kind, why = old.final()
    assert kind == "cancelled" and "superseded" in why
    assert new.final()[0] == "done" and new.final()[1].text == "filled:2"


def test_cancelling_one_clients_job_leaves_the_others_alone(held):
    sched, backend = held
    running, waiting, other = Outcome(), Outcome(), Outcome()
    job_a = sched.submit("a", spec(1), running)
    assert backend.started.wait(5)
    job_b = sched.submit("b", spec(2), waiting)
    sched.submit("c", spec(3), other)
    sched.cancel(job_b, "the client went away")
    assert waiting.final() == ("cancelled", "the client went away")
    sched.cancel(job_a, "the client went away")
    backend.gate.set()
    assert running.final()[0] == "cancelled"
    assert other.final()[0] == "done" and other.final()[1].text == "filled:3"
    assert [len(ids) for ids in backend.calls] == [1, 3]  # b never reached the engine


def test_step_events_come_before_the_result():
    sched = Scheduler()
    sched.start(FakeBackend(steps=3))
    out = Outcome()
    sched.submit("a", spec(2, draft_text=True), out, step_events=True)
    assert out.final()[0] == "done"
    assert [(k, getattr(p, "step", None)) for k, p in out.events[:-1]] == [("step", 1), ("step", 2), ("step", 3)]
    sched.stop()


def test_a_failing_fill_is_reported_and_the_next_one_runs():
    sched = Scheduler()
    sched.start(FakeBackend(fail_when_first_id=6))
    bad, good = Outcome(), Outcome()
    sched.submit("a", FillInputs([6, 6], canvas_length=8), bad)
    sched.submit("b", spec(2), good)
    kind, message = bad.final()
    assert kind == "error" and "refuses" in message
    assert good.final()[0] == "done"
    assert sched.stats()["requests"]["error"] == 1
    sched.stop()


def test_the_line_has_a_limit_but_a_waiting_client_may_still_replace_its_request(held):
    sched, backend = held
    sched.submit("x", spec(1), Outcome())
    assert backend.started.wait(5)
    for client in "abc":
        sched.submit(client, spec(2), Outcome())
    with pytest.raises(QueueFull):
        sched.submit("d", spec(2), Outcome())
    sched.submit("a", spec(3), Outcome())  # replaces a's waiting request: the line does not grow
    assert sched.stats()["queue"] == 3
