"""The self-check at load (engine.kernels.selfcheck, engine.denoising.checked_runner): a GPU-only piece that raises,
returns wrong values, hangs, or cannot capture a CUDA graph is switched off, the engine fills through the eager path
exactly as a healthy eager engine does, and its report says which piece fell back and why.

On a CPU the real pieces do not apply (Triton there is its interpreter, CUDA graphs do not exist), so the failures
are test doubles put into the kernel table the engine is checked with, never into the product path: what the table
holds is what the engine would serve with, as `test_an_unchecked_double_would_change_the_fill` shows."""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest
import torch

from engine.denoising import sampler as S
from engine.denoising.checked_runner import default_table, step_pieces
from engine.engine import Engine
from engine.kernels.table import Piece, Target, install, kernel_pieces, quant_piece, quant_reference, vocab_piece
from engine.quant.modules import QuantWeight

FILL = dict(canvas_length=16, steps=3, seed=1)


def always(_t: Target) -> bool:
    return True


def raising(*_a: object) -> object:
    raise RuntimeError("CUDA error: no kernel image is available for execution on the device")


def wrong_matmul(x: torch.Tensor, p, offsets: torch.Tensor) -> torch.Tensor:
    return (quant_reference(x, p, offsets) * 1.5).to(x.dtype)


def right_matmul(x: torch.Tensor, p, offsets: torch.Tensor) -> torch.Tensor:
    return quant_reference(x, p, offsets).to(x.device, x.dtype)


def table_with(**doubles: Piece):
    """The engine's own table, with the named pieces replaced (and appended when the table has none)."""
    def table(t: Target) -> list[Piece]:
        pieces = [doubles.get(p.name, p) for p in default_table(t)]
        return pieces + [p for name, p in doubles.items() if name not in {q.name for q in pieces}]
    return table


def fill(eng: Engine) -> list[int]:
    return eng.infill(eng.context_ids("def add(a, b):\n    return ", "\n"), **FILL).ids


@pytest.fixture(scope="module")
def int8(tiny_mixed):
    eng = Engine.from_pretrained(tiny_mixed, device="cpu", weights="int8")
    return eng, fill(eng)  # the healthy eager path: no piece applies on a CPU


def quant_double(eng: Engine, fast) -> Piece:
    return dataclasses.replace(quant_piece("int8", eng.dtype), fast=fast, applies=always)


def test_nothing_applies_on_a_cpu_and_the_status_says_so(int8):
    eng, _ = int8
    assert eng.gpu.wire() == {"device": "cpu", "checked": [], "fellBack": []}
    assert eng.settings_in_force()["gpu"] == {"value": eng.gpu.wire(), "source": "self-check"}
    assert all(m.kernel is None for m in eng.model.modules() if isinstance(m, QuantWeight))


@pytest.mark.parametrize("fast, reason", [(raising, "raised RuntimeError: CUDA error"),
                                          (wrong_matmul, "wrong values: error 5.00e-01")])
def test_a_failing_matmul_kernel_falls_back_with_identical_fills(int8, fast, reason, caplog):
    eng, healthy = int8
    with caplog.at_level(logging.INFO, logger="engine.kernels.selfcheck"):
        eng.self_check(table_with(**{"moe_quant:int8": quant_double(eng, fast)}))
    try:
        assert eng.gpu.wire()["checked"] == ["moe_quant:int8"]
        [fell] = eng.gpu.wire()["fellBack"]
        assert fell["piece"] == "moe_quant:int8" and fell["reason"].startswith(reason), fell
        assert all(m.kernel is None for m in eng.model.modules() if isinstance(m, QuantWeight))
        assert fill(eng) == healthy
        lines = [r.getMessage() for r in caplog.records if "self-check" in r.getMessage()]
        assert len(lines) == 1 and "moe_quant:int8: FAILED" in lines[0], lines
        assert "moe_quant:int8" in eng.gpu.warning() and "dg-lsp doctor" in eng.gpu.warning()
    finally:
        eng.self_check()


def test_a_passing_kernel_serves_and_fills_the_same(int8):
    eng, healthy = int8
    eng.self_check(table_with(**{"moe_quant:int8": quant_double(eng, right_matmul)}))
    try:
        assert eng.gpu.wire()["fellBack"] == [] and eng.gpu.passed("moe_quant:int8")
        assert all(m.kernel is right_matmul for m in eng.model.modules() if isinstance(m, QuantWeight))
        assert fill(eng) == healthy
    finally:
        eng.self_check()


def test_an_unchecked_double_would_change_the_fill(int8):
    """What the table holds is what serves: installed without its check, the wrong kernel changes the fill (so the
    tests above would fail if a failed piece still served)."""
    eng, healthy = int8
    install(eng.model, {"int8": wrong_matmul})
    try:
        assert fill(eng) != healthy
    finally:
        eng.self_check()


def test_a_hung_piece_times_out(int8):
    eng, healthy = int8

    def slow(x, p, offsets):
        time.sleep(3)
        return right_matmul(x, p, offsets)

    piece = dataclasses.replace(quant_double(eng, slow), timeout_s=0.2)
    eng.self_check(table_with(**{"moe_quant:int8": piece}))
    try:
        [fell] = eng.gpu.wire()["fellBack"]
        assert fell["piece"] == "moe_quant:int8" and fell["reason"].startswith("timed out after"), fell
        assert fill(eng) == healthy
    finally:
        eng.self_check()


def vocab_double(fast) -> Piece:
    return dataclasses.replace(vocab_piece(None), fast=fast, applies=always)  # type: ignore[arg-type]


def test_a_vocab_pass_that_raises_or_is_wrong_falls_back_to_torch(tiny_mixed):
    eng = Engine.from_pretrained(tiny_mixed, device="cpu")
    healthy = fill(eng)

    def wrong(logits, inv_t, softcap, seeds):
        out = S.vocab_pass_torch(logits, inv_t, softcap, seeds)
        return out._replace(argmax=(out.argmax + 1) % logits.shape[1])

    for fast, reason in ((raising, "raised"), (wrong, "wrong values")):
        eng.self_check(table_with(vocab_pass=vocab_double(fast)))
        assert [f["piece"] for f in eng.gpu.wire()["fellBack"]] == ["vocab_pass"]
        assert eng.gpu.wire()["fellBack"][0]["reason"].startswith(reason)
        assert eng._runner.noise.vocab_pass is S.vocab_pass_torch
        assert fill(eng) == healthy


def test_a_graph_capture_that_fails_leaves_graphs_off(tiny_mixed):
    """CUDA graphs cannot run on a CPU: the double stands for a capture that raises; the engine asked for graphs
    (as it does on CUDA by default) and serves without them."""
    eng = Engine.from_pretrained(tiny_mixed, device="cpu")
    healthy = fill(eng)

    def graphs_table(t: Target) -> list[Piece]:
        t = dataclasses.replace(t, graphs=True)
        graphs = next(p for p in step_pieces(t) if p.name == "cuda_graphs")
        return [*kernel_pieces(t), dataclasses.replace(graphs, fast=raising, applies=always)]

    eng.self_check(graphs_table)
    assert eng.gpu.wire()["fellBack"] == [
        {"piece": "cuda_graphs", "reason": "raised RuntimeError: CUDA error: no kernel image is available for "
                                           "execution on the device"}]
    assert eng.cuda_graphs is False and eng._runner.graphs is False
    assert fill(eng) == healthy


def test_the_step_piece_compares_one_step_with_the_eager_runner(tiny_mixed):
    """The real "cuda_graphs" piece's reference and inputs on a CPU: an eager step against itself agrees exactly,
    and a canvas shifted by one token is all wrong (what a broken capture would give)."""
    eng = Engine.from_pretrained(tiny_mixed, device="cpu")
    t = Target(eng.model, eng.device, eng.dtype, canvas=16)
    piece = next(p for p in step_pieces(t) if p.name == "cuda_graphs")
    args = piece.inputs(t)
    ids = piece.reference(*args)
    assert ids.shape == (16,) and piece.error(piece.reference(*args), ids) == 0.0
    assert piece.error((ids + 1) % eng.vocab_size, ids) == 1.0


def test_an_oom_during_a_fill_is_an_error_result_and_the_engine_keeps_serving(tiny_mixed, monkeypatch):
    eng = Engine.from_pretrained(tiny_mixed, device="cpu", prefix_cache_size=4)
    healthy = fill(eng)
    assert len(eng.prefix_cache) == 1
    real = eng.model.encode

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(eng.model, "encode", oom)
    res = eng.infill(eng.context_ids("class A:\n    ", "\n"), **FILL)
    assert res.error is not None and "out of memory" in res.error and not res.cancelled and res.text == ""
    assert eng.prefix_cache.size == 2 and len(eng.prefix_cache) == 0
    monkeypatch.setattr(eng.model, "encode", real)
    assert fill(eng) == healthy


def test_the_real_pieces_pass_their_checks_in_the_interpreter(tiny_mixed):
    """The table's own pieces (inputs, reference, tolerance) on the real kernels, run by Triton's interpreter in a
    child process: the vocabulary pass and the int8 / int4 matmuls pass and then serve. (On a CPU they do not apply
    unless made to: the interpreter is a test harness, not a product path.)"""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    code = f"""
import dataclasses, json
from engine.denoising.checked_runner import default_table
from engine.engine import Engine
from engine.quant.modules import QuantWeight
out = {{}}
for weights in ("int8", "int4"):
    eng = Engine.from_pretrained({str(tiny_mixed)!r}, device="cpu", weights=weights, sampler_backend="triton")
    eng.self_check(lambda t: [dataclasses.replace(p, applies=lambda t: True) if p.name.startswith("moe_quant") else p
                              for p in default_table(t)])
    kernels = {{getattr(m.kernel, "__name__", None) for m in eng.model.modules() if isinstance(m, QuantWeight)}}
    res = eng.infill(eng.context_ids("def add(a, b):", ""), canvas_length=16, steps=2, seed=1)
    out[weights] = dict(gpu=eng.gpu.wire(), kernels=sorted(map(str, kernels)), steps=res.steps, error=res.error)
print(json.dumps(out))
"""
    env = dict(os.environ, TRITON_INTERPRET="1", HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for weights in ("int8", "int4"):
        got = out[weights]
        assert got["gpu"]["checked"] == ["vocab_pass", f"moe_quant:{weights}"] and got["gpu"]["fellBack"] == [], got
        assert got["kernels"] == ["moe_quant_linear"] and got["steps"] >= 1 and got["error"] is None, got
