"""Seeded rewrites through the real server (settings rewriteFromSelection, rewriteNoise): dg.rewriteSelection sends
the selection's own token ids as the canvas seed down to the engine, through the service backend (an engine
service in this process, on the tiny checkpoint, recording what each fill asked) and the embedded engine (the same
answer); a chat checkpoint refuses the setting clearly."""

from __future__ import annotations

from typing import Any

import pytest

from engine.engine import Engine
from engine.testing.published import build_published_checkpoint
from tests.service.service_harness import InProcessService

from .conftest import pos

TEXT = "import os\n\ndef add(a, b):\n    total = a + b\n    return total\n"
URI = "file:///work/example.py"
SELECTED = "total = a + b"  # line 3, characters 4..17
SEEDED = {"debounceMs": 0, "rewriteFromSelection": True, "rewriteNoise": 0}


class Recording:
    """The embedded engine, recording the seed of every fill it is asked for."""

    def __init__(self, engine: Engine) -> None:
        self._engine, self.seeds = engine, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def infill(self, context_ids, **kw):
        self.seeds.append((kw.get("init_ids"), kw.get("start_noise")))
        return self._engine.infill(context_ids, **kw)


def rewrite(srv) -> tuple[dict, list[dict]]:
    """dg.rewriteSelection of SELECTED: the command's result (without its latency) and the edits applied for it."""
    before = len(srv.applied)
    arg = {"textDocument": {"uri": URI}, "range": {"start": pos(3, 4), "end": pos(3, 17)}}
    answer = srv.call("workspace/executeCommand", {"command": "dg.rewriteSelection", "arguments": [arg]},
                      timeout=120)
    assert "result" in answer, answer
    return {k: v for k, v in answer["result"].items() if k != "latencyMs"}, srv.applied[before:]


@pytest.fixture(scope="module")
def recording(tiny_ckpt) -> Recording:
    return Recording(Engine.from_pretrained(tiny_ckpt, device="cpu"))


def test_a_seeded_rewrite_sends_the_selection_through_the_service_backend_as_the_embedded_engine_runs_it(
        start_server, recording, tiny_ckpt):
    with InProcessService(recording, tiny_ckpt) as service:
        srv = start_server({**SEEDED, "backend": "service", "endpoint": service.url})
        srv.open(URI, TEXT, "python")
        via_service = rewrite(srv)
        init_ids, noise = recording.seeds[-1]
        assert recording.decode(init_ids) == SELECTED and noise == 0.0
        srv.send(srv.notification("workspace/didChangeConfiguration",
                                  {"settings": {"dg": {"rewriteFromSelection": False}}}))
        from_noise = rewrite(srv)
        assert recording.seeds[-1] == (None, 1.0)  # the setting off: from noise
    assert from_noise != via_service  # the seed changed the answer
    embedded = start_server(SEEDED)
    embedded.open(URI, TEXT, "python")
    assert rewrite(embedded) == via_service  # the same seeded fill, hence the same answer and edit


def test_a_chat_checkpoint_refuses_a_seeded_rewrite_and_edits_nothing(start_server, tmp_path):
    srv = start_server(SEEDED, model=build_published_checkpoint(tmp_path / "dg"))
    srv.open(URI, TEXT, "python")
    result, applied = rewrite(srv)
    assert result["applied"] is False and applied == []
    assert result["reason"].startswith("rewriteFromSelection starts the canvas from the selection's tokens")
    assert "prompt format is chat" in result["reason"]
    shown = [m["params"]["message"] for m in srv.seen if m.get("method") == "window/showMessage"]
    assert any("rewriteFromSelection" in m for m in shown), shown
