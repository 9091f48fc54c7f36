"""The native CPU kernels (engine.quant.native): ggml rows dequantized straight from their stored blocks give the
very bits of the torch dequantizer (itself bit-equal to gguf-py's), every fp16 pattern included; a lookup gives the
table's rows; the row-by-row product equals the GEMM on the dequantized weight to fp32 summation order; and where the
library cannot be built, the engine says why and keeps its torch path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gguf import _random_blocks

from engine.formats.gguf_quants import BLOCKS, dequantize
from engine.quant.native import build, ops


@pytest.fixture(autouse=True)
def library(monkeypatch):
    """The library as built here (a test that changes the environment gets its own state, restored after)."""
    monkeypatch.setattr(build, "_state", {})
    if build.load() is None:
        pytest.skip(f"the native library does not build here: {build.reason()}")


def _raw(qtype: str, rows: int, k: int, seed: int = 0, finite: bool = False) -> torch.Tensor:
    """Random stored rows; `finite`: BF16 rows from normal values (random BF16 bytes hold infinities and NaNs)."""
    if finite and qtype == "BF16":
        return torch.randn(rows, k, generator=torch.Generator().manual_seed(seed)).bfloat16().view(torch.uint8)
    blocks = k // BLOCKS[qtype][0]
    return torch.from_numpy(_random_blocks(qtype, rows, blocks, np.random.default_rng(seed)))


@pytest.mark.parametrize("qtype", list(BLOCKS))
def test_rows_bit_equal_the_torch_dequantizer(qtype):
    k = 512
    raw = _raw(qtype, 7, k, seed=list(BLOCKS).index(qtype))
    want = dequantize(raw, qtype, k)
    out = torch.full((9, k), float("nan"))
    got = ops.dequant_rows(qtype, raw, 2, 7, k, out)
    assert torch.equal(got.view(torch.int32), want[2:7].view(torch.int32))
    assert torch.isnan(out[5:]).all()  # nothing written past the rows asked for


def test_every_fp16_pattern_converts_exactly():
    """The library's own half -> float (scales of every ggml type): all 65,536 patterns, subnormals and infinities
    bit-equal torch's; NaNs stay NaN with their sign."""
    raw = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.uint8).reshape(1, -1)
    want = raw.view(torch.float16).float()
    got = ops.dequant_rows("F16", raw, 0, 1, 1 << 16, torch.empty(1, 1 << 16))
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))
    assert torch.equal(torch.signbit(got[nan]), torch.signbit(want[nan]))


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K", "Q6_K", "Q5_K"])
def test_gather_gives_the_tables_rows(qtype):
    raw = _raw(qtype, 40, 256, seed=3)
    table = dequantize(raw, qtype, 256)
    ids = torch.tensor([[3, 39, 0], [3, 17, 5]])
    got = ops.gather(qtype, raw, ids, 256)
    assert got.shape == (2, 3, 256) and torch.equal(got, table[ids])
    with pytest.raises(IndexError):
        ops.gather(qtype, raw, torch.tensor([40]), 256)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16"])
@pytest.mark.parametrize("m", [1, 2, 5])
def test_row_by_row_product_equals_the_gemm(qtype, m):
    """x @ W.T for rows 3:30 of W (a count not a multiple of 4, the kernel's block), into a strided y."""
    k = 256
    raw = _raw(qtype, 33, k, seed=m, finite=True)
    w = dequantize(raw, qtype, k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
    y = torch.full((m, 40), float("nan"))
    got = ops.qmatmul(qtype, raw, 3, 30, k, x, y[:, 5:32])
    want = x @ w[3:30].T
    assert float((got - want).abs().max()) <= 1e-6 * float(want.abs().max())
    assert torch.isnan(y[:, :5]).all() and torch.isnan(y[:, 32:]).all()


def test_bad_calls_are_refused():
    raw = _raw("Q8_0", 4, 64)
    with pytest.raises(ValueError, match="out"):
        ops.dequant_rows("Q8_0", raw, 0, 4, 64, torch.empty(2, 64))
    with pytest.raises(ValueError, match="x must be fp32"):
        ops.qmatmul("Q8_0", raw, 0, 4, 64, torch.zeros(1, 64, dtype=torch.float64), torch.empty(1, 4))
    with pytest.raises(ValueError, match="uint8 rows"):
        ops.dequant_rows("Q8_0", raw.float(), 0, 4, 64, torch.empty(4, 64))


def test_without_a_compiler_the_engine_says_why_and_keeps_torch(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(build, "_state", {})
    assert build.load() is None and "no C compiler" in build.reason()
    assert not ops.available("Q4_K")
    monkeypatch.setenv("DG_NATIVE", "0")
    monkeypatch.setattr(build, "_state", {})
    assert build.load() is None and build.reason() == "DG_NATIVE=0"


def test_a_failed_build_is_reported_not_raised(monkeypatch, tmp_path):
    """A compiler that fails (here: one that exits 1) leaves no library behind and says so."""
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'cc: error: broken' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_state", {})
    assert build.load() is None and "broken" in build.reason()
    assert not list((tmp_path / "cache").rglob("*.so"))


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K"])
@pytest.mark.parametrize("m", [1, 3])
def test_int8_product_is_the_weight_times_x_rounded_to_8_bits(qtype, m):
    """The K-quants' 8-bit product (x in int8 per 256 values, integer sums): the dequantized weight times x rounded
    as it rounds it, to fp32 summation order; against the exact x its error is x's rounding, well under the
    format's own."""
    if not ops.int8_available(qtype):
        pytest.skip("the library has no 8-bit product here (no AVX2)")
    k = 512
    raw = _raw(qtype, 21, k, seed=m)
    w = dequantize(raw, qtype, k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
    blocks = x.reshape(-1, 256)
    scale = blocks.abs().amax(-1, keepdim=True) / 127
    rounded = (torch.round(blocks * (1 / scale)).clamp(-127, 127) * scale).reshape(x.shape)
    y = torch.full((m, 30), float("nan"))
    got = ops.qmatmul_int8(qtype, raw, 1, 21, k, x, y[:, 4:24])
    want = rounded @ w[1:21].T
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    assert float((got - x @ w[1:21].T).abs().max()) <= 0.03 * float(want.abs().max())
    assert torch.isnan(y[:, :4]).all() and torch.isnan(y[:, 24:]).all()
    with pytest.raises(ValueError, match="not for Q8_0"):
        ops.qmatmul_int8("Q8_0", _raw("Q8_0", 4, 256), 0, 4, 256, x[:, :256], torch.empty(m, 4))


def test_check_says_which_cpu_kernels_serve(monkeypatch):
    """`dg-lsp --check` on a CPU names the native kernels in use, or why not."""
    from engine.tools.check import run_check

    out = run_check(None, device="cpu", fill=False)  # the `library` fixture skipped where nothing builds
    assert out["ok"] and out["cpu_kernels"]["native"] is True and "int8_products" in out["cpu_kernels"]
    monkeypatch.setenv("DG_NATIVE", "0")
    monkeypatch.setattr(build, "_state", {})
    out = run_check(None, device="cpu", fill=False)
    assert out["cpu_kernels"] == {"native": False, "why": "DG_NATIVE=0"}


def test_missing_sources_are_reported_not_raised(monkeypatch, tmp_path):
    """An install without the kernels' source (a wheel that left it out) serves on the torch path and says why."""
    monkeypatch.setattr(build, "HEADERS", [tmp_path / "gone.h"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_state", {})
    assert build.load() is None and "source is missing" in build.reason()
