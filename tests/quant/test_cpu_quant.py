"""CPU matmuls on quantized weights (engine.quant.cpu_matmul): every format the engine loads gives, tile by tile,
the outputs of its whole dequantized weight (F.linear / per-expert GEMM on the same fp32 values) up to fp32
summation order (the tiles hold the very values: tests/quant/test_gguf.py's parity holds on them), never
expands a whole weight or expert stack, and reads only the experts the router picked. ggml weights run each way
(`way`): natively, row by row against few rows of x ("fused", x exact; "int8", the K-quants with x in 8 bits as
llama.cpp does: then the result is the dequantized weight times x rounded to 8 bits), natively in tiles through
torch's GEMM ("tiles"), and repacked for torch where the native library is off ("torch", DG_NATIVE=0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_gguf import _random_blocks

from engine.formats.gguf_quants import BLOCKS, dequantize
from engine.quant import cpu_matmul as C
from engine.quant import formats as QF
from engine.quant.formats import QuantParts, quantize
from engine.quant.modules import QuantLinear, QuantWeight
from engine.quant.native import build
from engine.quant.native import ops as native

GGML = ["Q8_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]


def _ggml_parts(qtype: str, lead: tuple[int, ...], n: int, k: int, seed: int = 0) -> tuple[QuantParts, torch.Tensor]:
    rng = np.random.default_rng(seed)
    rows = int(np.prod(lead)) * n
    raw = torch.from_numpy(_random_blocks(qtype, rows, k // BLOCKS[qtype][0], rng)).reshape(*lead, n, -1)
    return QuantParts(f"gguf:{qtype}", (*lead, n, k), raw, torch.empty(0)), dequantize(raw, qtype, k)


def _engine_parts(fmt: str, lead: tuple[int, ...], n: int, k: int) -> tuple[QuantParts, torch.Tensor]:
    p = quantize(torch.randn(*lead, n, k, generator=torch.Generator().manual_seed(3)), fmt)
    return p, QF.dequantize(p)


def _close(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-6) -> None:
    """Equal up to fp32 summation order: 1e-6 of the output's scale (a code or scale off by one moves it by far
    more; 1e-5 for the int8 product, whose scales multiply integer sums in another order)."""
    assert got.shape == want.shape and float((got - want).abs().max()) <= rel * float(want.abs().max())


@pytest.fixture(params=["fused", "int8", "tiles", "torch"])
def way(request, monkeypatch):
    """How a ggml weight is multiplied (see the module docstring); the library's state comes back after."""
    monkeypatch.setattr(build, "_state", {})
    monkeypatch.setenv("DG_CPU_ACTIVATIONS", "int8" if request.param == "int8" else "fp32")
    if request.param == "torch":
        monkeypatch.setenv("DG_NATIVE", "0")
    elif request.param == "tiles":
        monkeypatch.setattr(C, "FUSED_ROWS", 0)
    if request.param != "torch" and build.load() is None:
        pytest.skip(f"the native library does not build here: {build.reason()}")
    return request.param


def _expected(way: str, fmt: str, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """F.linear(x, w), with x rounded to 8 bits per 256 values where the way quantizes it (the K-quants' int8
    product: its integer sums are exact, so it computes the dequantized weight times the rounded x)."""
    if way == "int8" and fmt in native.INT8 and native.int8_available(fmt):
        return F.linear(_int8_round(x), w)
    return F.linear(x, w)


def _int8_round(x: torch.Tensor) -> torch.Tensor:
    """x rounded as int8.c quantizes it: per 256 values, scale max|x| / 127, codes round-half-even."""
    blocks = x.reshape(-1, 256)
    scale = blocks.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(scale != 0, 1 / scale, torch.zeros_like(scale))
    return (torch.round(blocks * inv).clamp(-127, 127) * scale).reshape(x.shape)


def _spy_rows(monkeypatch) -> list[tuple[int, int]]:
    """(lo, hi) of every run of weight rows read, whichever way (tiles, or the native row-by-row product)."""
    read: list[tuple[int, int]] = []
    dequant = C.CpuWeight.dequant

    def spy(self, lo, hi, out):
        read.append((lo, hi))
        return dequant(self, lo, hi, out)

    def spy_on(product):
        def spy_q(qtype, raw, lo, hi, *a, **k):
            read.append((lo, hi))
            return product(qtype, raw, lo, hi, *a, **k)
        return spy_q

    monkeypatch.setattr(C.CpuWeight, "dequant", spy)
    for name in ("qmatmul", "qmatmul_int8"):
        monkeypatch.setattr(native, name, spy_on(getattr(native, name)))
    return read


def _parts(fmt: str, lead: tuple[int, ...], n: int, k: int) -> tuple[QuantParts, torch.Tensor]:
    return _ggml_parts(fmt, lead, n, k) if fmt in GGML else _engine_parts(fmt, lead, n, k)


@pytest.mark.parametrize("fmt", [*GGML, "int8", "int4", "fp8"])
def test_linear_equals_the_dequantized_weight(fmt, way, monkeypatch):
    if fmt not in GGML and way != "torch":
        pytest.skip("int8 / int4 / fp8 have the torch way only")
    k = 512 if fmt in GGML else 300  # 300: int4's last group of 128 is short
    parts, w = _parts(fmt, (), 70, k)
    monkeypatch.setattr(C, "TILE_VALUES", 16 * k)  # several tiles, the last one short
    lin = QuantLinear(parts)
    x = torch.randn(2, 9, k, generator=torch.Generator().manual_seed(1))
    got = lin(x)
    _close(got, _expected(way, fmt, x, w), 1e-5 if way == "int8" else 1e-6)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_K", "Q6_K", "int4"])
def test_experts_equal_per_expert_gemms_and_skip_unrouted_ones(fmt, way, monkeypatch):
    if fmt == "int4" and way != "torch":
        pytest.skip("int4 has the torch way only")
    k = 256
    parts, w = _parts(fmt, (4,), 48, k)
    qw = QuantWeight(parts)
    counts = [5, 0, 3, 0]  # experts 1 and 3 get no rows
    offsets = torch.tensor(np.cumsum(counts), dtype=torch.int32)
    x = torch.randn(sum(counts), k, generator=torch.Generator().manual_seed(2))
    read = _spy_rows(monkeypatch)
    got = qw.grouped_linear(x, offsets)
    want = torch.cat([_expected(way, fmt, x[:5], w[0]), _expected(way, fmt, x[5:], w[2])])
    _close(got, want, 1e-5 if way == "int8" else 1e-6)
    rows = {r for lo, hi in read for r in range(lo, hi)}
    assert rows == set(range(0, 48)) | set(range(96, 144))  # experts 0 and 2 only


def test_cpu_path_never_dequantizes_a_whole_weight(way, monkeypatch):
    """Neither the whole-tensor dequantizers nor a tile bigger than TILE_VALUES values run on the CPU path (the
    native row-by-row products hold one to four weight rows at a time)."""
    parts, w = _ggml_parts("Q4_K", (3,), 64, 512)

    def refuse(*a, **k):
        raise AssertionError("whole-weight dequantize on the CPU path")

    monkeypatch.setattr(QF, "dequantize", refuse)
    monkeypatch.setattr("engine.quant.modules.dequantize", refuse)
    monkeypatch.setattr(C, "TILE_VALUES", 8 * 512)
    read = _spy_rows(monkeypatch)
    qw = QuantWeight(parts)
    x = torch.randn(6, 512)
    offsets = torch.tensor([2, 4, 6], dtype=torch.int32)
    got = qw.grouped_linear(x, offsets)
    want = torch.cat([_expected(way, "Q4_K", x[2 * e:2 * e + 2], w[e]) for e in range(3)])
    _close(got, want, 1e-5 if way == "int8" else 1e-6)
    assert read
    if way in ("tiles", "torch"):  # the native products hold one to four rows at a time, not a tile
        assert max(hi - lo for lo, hi in read) * 512 <= 8 * 512


def test_packed_layout_is_no_bigger_than_a_byte_and_a_quarter_per_value():
    """The repacked Q4_K / Q8_0 weights stay small: codes plus one fp32 scale and bias per 32 values (Q4_K),
    codes plus an f16 scale per 32 (Q8_0, the file's own size)."""
    for qtype, limit in (("Q4_K", 0.75), ("Q8_0", 34 / 32)):
        parts, _ = _ggml_parts(qtype, (2,), 16, 512)
        packed = C.pack(parts)
        assert packed.nbytes / (2 * 16 * 512) <= limit


def test_packing_leaves_the_stored_bytes_intact():
    """Packing pages the stored blocks out (they are a file's map when loaded from a GGUF): the bytes read back the
    same, and the weight still dequantizes to what it did."""
    parts, w = _ggml_parts("Q6_K", (2,), 64, 512)
    before = parts.qweight.clone()
    C.pack(parts)
    assert torch.equal(parts.qweight, before)
    assert torch.equal(QF.dequantize(parts), w)
