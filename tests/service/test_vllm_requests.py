"""The `openai` backend asks vLLM for exactly what the embedded engine would run: for every hole the fill pipeline
makes (rest of line, statement, block, a rewrite long enough for two canvases), with the checkpoint's steps and with
a `steps` setting, the body the stand-in records carries the embedded engine's context ids, canvas length, step
budget and canvas count (`vllm_xargs` and `max_tokens`). Also: when the per-request arguments are sent (vLLM
detected from /v1/models, or the `openaiDiffusion` setting), and how `finish_reason` is read."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fake_vllm import FakeVLLM

from dg_lsp.config import Settings
from dg_lsp.documents import Document
from dg_lsp.fill.cache import FillCaches
from dg_lsp.fill.holes import hole_at_cursor, hole_for_selection
from dg_lsp.fill.pipeline import FillEvents, Policy, run_fill
from dg_lsp.fill.worker import Worker
from dg_lsp.trace import Trace
from engine.engine import Engine

TEXT = '''import math


def area(width, height):
    """The area of a rectangle."""
    return width * height


def circle(radius):
    total = 0
    for step in range(10):
        total += math.pi * radius * radius / 10
    return total


class Shape:
    def __init__(self, name):
        self.name = name

    def describe(self):

print(area(2, 3), circle(1.5))
'''


def holes(snap) -> dict[str, Any]:
    """One hole of each size the pipeline picks, by name."""
    at = TEXT.index
    return {"rest of line": hole_at_cursor(snap, at("return width") + len("return ")),
            "statement": hole_at_cursor(snap, at("import math\n") + len("import math\n")),  # a blank line
            "block": hole_at_cursor(snap, at("    def describe(self):\n") + len("    def describe(self):\n")),
            "long rewrite": hole_for_selection(snap, at("def circle"), at("class Shape"))}


class Recording:
    """The embedded engine, recording what each fill asked it to run (steps resolved as the engine resolves them)."""

    def __init__(self, engine: Engine) -> None:
        self._engine, self.runs = engine, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def infill(self, context_ids, *, canvas_length, steps=None, max_canvases=1, **kw):
        self.runs.append({"context": list(context_ids), "canvas": canvas_length, "canvases": max_canvases,
                          "steps": self._engine.settings(steps).steps})
        return self._engine.infill(context_ids, canvas_length=canvas_length, steps=steps, max_canvases=max_canvases,
                                   **kw)


async def fill_all(backend, steps: int | None) -> list[str]:
    """Run every hole of TEXT through the fill pipeline with `backend` (a fresh cache: the engine runs each time)."""
    worker = Worker(lambda s: backend, check=None)
    await worker.load(Settings())
    snap = Document("file:///shapes.py", "python", 1, TEXT).snapshot()
    names = []
    try:
        for name, hole in holes(snap).items():
            kind = "command" if name == "long rewrite" else "keystroke"
            policy = Policy(kind, steps=steps, entropy_bound=None, context_tokens=1024, drafts=False,
                            encoding="utf-16")
            await run_fill(snap, hole, policy, worker.loaded, FillCaches(), worker=worker, request_id=name,
                           trace=Trace(0.0), identity_of=lambda uri: snap.identity,
                           events=FillEvents(draft=lambda body: None, busy=lambda: None))
            names.append(name)
    finally:
        worker.shutdown()
    return names


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.from_pretrained(None, device="cpu", dtype="float32")


@pytest.fixture
def vllm():
    with FakeVLLM() as fake:
        yield fake


@pytest.mark.parametrize("steps", [None, 6])
async def test_each_fill_asks_vllm_for_the_embedded_engines_canvas_and_steps(engine, vllm, connect, steps):
    embedded = Recording(engine)
    names = await fill_all(embedded, steps)
    remote = connect(Settings(backend="openai", endpoint=vllm.url))
    assert remote.diffusion and remote.server == "vLLM 0.33.0"
    assert await fill_all(remote, steps) == names
    sent = [body for path, body, _ in vllm.requests if path == "/v1/completions"]
    assert len(sent) == len(embedded.runs) == len(names)
    for name, run, body in zip(names, embedded.runs, sent, strict=True):
        assert body["prompt"] == run["context"], name
        assert body["vllm_xargs"] == {"diffusion_canvas_length": run["canvas"],
                                      "diffusion_max_steps": run["steps"]}, name
        assert body["max_tokens"] == run["canvas"] * run["canvases"], name
    assert {r["canvas"] for r in embedded.runs} == {16, 32, 64}  # every canvas size the checkpoint has
    assert max(r["canvases"] for r in embedded.runs) == 2  # and a fill of two canvases
    assert {r["steps"] for r in embedded.runs} == {steps or 16}  # the shipped model's 16, or the setting


@pytest.mark.parametrize(("owned_by", "setting", "sent"), [("vllm", "auto", True), ("vllm", "off", False),
                                                           ("dg-lsp", "auto", False), ("openai", "on", True)])
def test_per_request_arguments_go_to_vllm_or_where_the_setting_says(vllm, connect, owned_by, setting, sent):
    vllm.owned_by = owned_by
    b = connect(dataclasses.replace(Settings(backend="openai", endpoint=vllm.url), openai_diffusion=setting))
    ids = b.prompt_format.context(b.encode("x = "), b.encode("\n"))
    assert b.infill(ids, canvas_length=16).text == "return width * height"
    body = vllm.requests[-1][1]
    assert ("vllm_xargs" in body) is sent
    assert set(body) - {"vllm_xargs"} == {"model", "prompt", "max_tokens", "stream"}  # never seed, temperature, ...
    assert ("per-request canvases" in b.name) is sent and ("vLLM 0.33.0" in b.name) is (owned_by == "vllm")


def test_finish_reasons(vllm, connect):
    b = connect(Settings(backend="openai", endpoint=vllm.url))
    ids = b.prompt_format.context(b.encode("x = "), b.encode("\n"))
    vllm.finish = "length"  # the last canvas reached no end token: its text is kept, as the embedded engine keeps it
    res = b.infill(ids, canvas_length=16)
    assert res.text == "return width * height" and res.finish_reason == "length" and res.error is None
    vllm.finish = "abort"
    res = b.infill(ids, canvas_length=16)
    assert res.text == "" and not res.cancelled and "finish_reason 'abort'" in res.error


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_a_seeded_fill_sends_its_seed_canvas_to_vllm(vllm, connect, noise):
    """vLLM takes the seed canvas as sent (exactly the request's canvas width): laid out as the embedded engine lays
    out its first canvas (the seed, eos, pad), corrupted here at `start_noise`, no position pinned."""
    b = connect(Settings(backend="openai", endpoint=vllm.url))
    ids = b.prompt_format.context(b.encode("x = "), b.encode("\n"))
    init = b.encode("return width * height")
    res = b.infill(ids, canvas_length=32, init_ids=init, start_noise=noise, seed=3)
    assert res.error is None
    xargs = vllm.requests[-1][1]["vllm_xargs"]
    laid_out = init + [b.local.eos_id] + [b.local.pad_id] * (32 - len(init) - 1)
    assert xargs["diffusion_canvas_length"] == 32 and xargs["diffusion_pinned"] == []
    canvas = xargs["diffusion_seed_canvas"]
    assert len(canvas) == 32 and all(0 <= t < b.local.vocab_size for t in canvas)
    kept = sum(a == w for a, w in zip(canvas, laid_out, strict=True))
    assert canvas == laid_out if noise == 0 else 0 < kept < 32
    b.infill(ids, canvas_length=32, init_ids=init, start_noise=noise, seed=3)
    assert vllm.requests[-1][1]["vllm_xargs"]["diffusion_seed_canvas"] == canvas  # the fill's seed picks the noise
    b.infill(ids, canvas_length=32, init_ids=init, start_noise=1.0)  # full noise: nothing to seed
    assert set(vllm.requests[-1][1]["vllm_xargs"]) == {"diffusion_canvas_length", "diffusion_max_steps"}


def test_a_server_without_vllm_diffusion_gets_the_plain_request_for_a_seeded_fill(vllm, connect):
    vllm.owned_by = "dg-lsp"
    b = connect(Settings(backend="openai", endpoint=vllm.url))
    ids = b.prompt_format.context(b.encode("x = "), b.encode("\n"))
    assert b.infill(ids, canvas_length=16, init_ids=b.encode("y"), start_noise=0.0).error is None
    assert set(vllm.requests[-1][1]) == {"model", "prompt", "max_tokens", "stream"}
