"""The request trace: a span per stage; its stages are contiguous (they add up to the server's own time), and a
request that did not go through a stage has no figure for it."""

from __future__ import annotations

import pytest

from dg_lsp.trace import STAGES, Trace


def test_stages_add_up_to_the_time_from_arrival_to_answer_without_the_wait_and_the_engine():
    t = Trace(arrived=10.000, wait_s=0.002)
    for stage, start, end in [("handler", 10.003, 10.003), ("fill", 10.004, 10.1085), ("prompt", 10.004, 10.005),
                              ("engine", 10.0052, 10.107), ("engine_thread", 10.006, 10.106),
                              ("post", 10.1072, 10.108)]:
        t.record(stage, start, end)
    body = t.figures(out=10.109, now=10.110, engine_ms=99.0)
    assert tuple(body["stagesMs"]) == STAGES
    assert body["respondedMs"] == 109.0 and body["waitMs"] == 2.0 and body["writeMs"] == 1.0
    assert body["stagesMs"]["engineGlue"] == 1.0 and body["stagesMs"]["input"] == 1.0
    own = body["respondedMs"] - body["waitMs"] - 99.0
    assert abs(sum(body["stagesMs"].values()) - own) < 1e-6


def test_a_cached_fill_has_no_engine_stages_and_a_typed_ahead_answer_no_stages():
    t = Trace(arrived=1.0)
    for stage, start, end in [("handler", 1.001, 1.001), ("fill", 1.002, 1.005), ("prompt", 1.002, 1.003),
                              ("post", 1.0035, 1.004)]:
        t.record(stage, start, end)
    stages = t.figures(out=1.006, now=1.006, engine_ms=0.0)["stagesMs"]
    assert "toEngine" not in stages and stages["post"] == 1.0 and stages["answer"] == 2.0
    typed = Trace(arrived=2.0)
    typed.mark("handler")
    assert "stagesMs" not in typed.figures(out=2.002, now=2.002, engine_ms=0.0)


def test_a_span_is_recorded_around_its_block_and_not_when_the_block_raises():
    t = Trace(arrived=0.0)
    with t.span("prompt"):
        pass
    start, end = t.spans["prompt"]
    assert start <= end and t.ms("prompt") is not None
    with pytest.raises(ValueError), t.span("post"):
        raise ValueError("the stage failed")
    assert "post" not in t.spans and t.ms("post") is None
