"""One table of cases, run through every backend behind the engine seam (conftest.BACKENDS: embedded, service,
openai against the engine service, openai against a vLLM-shaped stand-in): what engine.seam.InfillBackend promises,
checked the same way on each. Where backends differ, the difference is data on the Subject (conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engine.seam import StepDraft
from tests.conformance.conftest import HeldEngine, Subject, cancel_when, run_in_thread

PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\n\nprint(add(2, 3))\n"
ARGS: dict[str, Any] = dict(canvas_length=16, steps=4, seed=3)


def context(s: Subject) -> list[int]:
    return s.backend.prompt_format.context(s.backend.encode(PREFIX), s.backend.encode(SUFFIX))


def assert_a_fill(res: Any) -> None:
    assert res.error is None and not res.cancelled
    assert isinstance(res.text, str) and res.steps >= 1 and res.reused_prefix_tokens >= 0
    assert res.timings["total_ms"] > 0  # the call's wall time, on every backend


def assert_a_cancel(res: Any) -> None:
    assert res.cancelled and res.error is None and res.text == "" and res.confidence is None


def fill(s: Subject, engine: HeldEngine) -> None:
    res = s.backend.infill(context(s), **ARGS)
    assert_a_fill(res)
    if s.same_fill:  # every argument reached the same engine: the same fill
        assert res.text == engine.infill(context(s), **ARGS).text


def cancel_before_start(s: Subject, engine: HeldEngine) -> None:
    token, drafts = s.backend.new_cancel_token(), []
    token.cancel()
    res = s.backend.infill(context(s), cancel=token, on_step=drafts.append, **ARGS)
    assert_a_cancel(res)
    assert res.steps == 0 and drafts == []


def cancel_mid_fill(s: Subject, engine: HeldEngine) -> None:
    token = s.backend.new_cancel_token()
    with s.hold() as reached:  # the fill is held running once it reaches the engine
        thread, out = run_in_thread(lambda: s.backend.infill(context(s), cancel=token, **{**ARGS, "steps": 64}))
        cancel_when(reached, token)
    thread.join(60)
    assert_a_cancel(out["res"])
    assert out["res"].steps <= 2  # stopped within a step of the cancel (steps that reached this backend)


def per_step_drafts(s: Subject, engine: HeldEngine) -> None:
    drafts: list[StepDraft] = []
    res = s.backend.infill(context(s), on_step=drafts.append, draft_text=True,
                           **{**ARGS, "entropy_bound": 1e-9})  # a tiny bound: no early stop
    assert_a_fill(res)
    if not s.steps_streamed:  # an OpenAI-compatible server streams no steps
        assert drafts == []
        return
    assert [d.step for d in drafts] == list(range(1, res.steps + 1)) and res.steps == ARGS["steps"]
    assert {d.steps for d in drafts} == {ARGS["steps"]} and drafts[-1].text == res.text


def server_error(s: Subject, engine: HeldEngine) -> None:
    if s.failing is None:
        pytest.skip("no server: the embedded engine raises on invalid input instead")
    with s.failing():
        res = s.backend.infill(context(s), **ARGS)
    assert res.text == "" and not res.cancelled and isinstance(res.error, str) and res.error
    assert res.confidence is None and "HTTP" in res.error  # the reason, with the server's status
    assert_a_fill(s.backend.infill(context(s), **ARGS))  # one failure does not make the backend unusable


def encode_parity(s: Subject, engine: HeldEngine) -> None:
    """Prompts are laid out in the language server exactly as the embedded engine lays them out."""
    assert s.backend.encode(PREFIX) == engine.encode(PREFIX)
    assert context(s) == engine.prompt_format.context(engine.encode(PREFIX), engine.encode(SUFFIX))
    assert s.backend.splits_before_newline == engine.splits_before_newline
    assert s.backend.prompt_format.canvas_lengths == engine.prompt_format.canvas_lengths
    assert s.backend.prompt_format.canvas_headroom == 0 and s.backend.prompt_format.name == "fim"


def confidence(s: Subject, engine: HeldEngine) -> None:
    """Present, or explicitly unknown (None) on a backend that cannot know it; never made up."""
    res = s.backend.infill(context(s), **ARGS)
    assert_a_fill(res)
    if s.confidence_known:
        assert isinstance(res.confidence, float) and 0.0 <= res.confidence <= 1.0
    else:
        assert res.confidence is None


def settings_and_name(s: Subject, engine: HeldEngine) -> None:
    """One shape of settings_in_force on every backend: {name: {"value", "source"}}, with min_confidence."""
    force = s.backend.settings_in_force()
    assert force and all(set(v) == {"value", "source"} for v in force.values()), force
    assert "min_confidence" in force and isinstance(s.backend.name, str) and s.backend.name


CASES: list[Callable[[Subject, HeldEngine], None]] = [fill, cancel_before_start, cancel_mid_fill, per_step_drafts,
                                                       server_error, encode_parity, confidence, settings_and_name]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_the_seam(subject: Subject, engine: HeldEngine, case: Callable[[Subject, HeldEngine], None]) -> None:
    case(subject, engine)
