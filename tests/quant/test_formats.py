"""engine.quant.formats: round-trip error bounds, nibble packing, byte counts, chunking, and the kernel oracle's own
reading of the storage layout."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.reference import moe_quant_reference
from engine.quant import formats as F


def weight(shape, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g) / shape[-1] ** 0.5
    w[..., 0, :] *= 30  # an outlier row
    return w


@pytest.mark.parametrize("k", [64, 96, 128, 200, 257])
def test_pack_unpack_inverse(k):
    q = torch.randint(0, 16, (3, 5, k), dtype=torch.uint8)
    packed = F.pack_int4(q)
    assert packed.shape == (3, 5, (k + 1) // 2)
    assert torch.equal(F.unpack_int4(packed, k), q)


@pytest.mark.parametrize("fmt,sym", [("int8", False), ("fp8", False), ("int4", False), ("int4", True)])
@pytest.mark.parametrize("shape", [(48, 96), (2, 40, 200), (3, 16, 257)])
def test_round_trip_error_is_within_half_a_step(fmt, sym, shape):
    w = weight(shape)
    p = F.quantize(w, fmt, symmetric=sym)
    back = F.dequantize(p)
    assert back.shape == w.shape
    err = (back - w).abs()
    if fmt == "fp8":  # 3 mantissa bits: half an ulp is 2**-4 relative (normal range), subnormals 2**-10 * scale
        assert bool((err <= w.abs() * 2**-4 + p.scale * 2**-9 * 1.01).all())
    elif fmt == "int8":
        assert bool((err <= p.scale * 0.5 * 1.0001).all())
    else:
        k = shape[-1]
        step = p.scale.float().repeat_interleave(p.group_size, -1)[..., :k]
        assert bool((err <= step * 0.5 * 1.0001 + 1e-12).all())
    # the outlier row does not flatten the other rows: their error stays far below the outlier's scale
    assert float(err[..., 1:, :].max()) < 0.1 * float(w[..., 0, :].abs().max())


def test_asymmetric_int4_fits_a_shifted_group_better():
    w = weight((32, 256)).abs()  # one-sided values: symmetric groups waste half their levels
    sym = (F.dequantize(F.quantize(w, "int4", symmetric=True)) - w).pow(2).mean()
    asym = (F.dequantize(F.quantize(w, "int4", symmetric=False)) - w).pow(2).mean()
    assert asym < 0.5 * sym


@pytest.mark.parametrize("fmt,sym", [("int8", False), ("fp8", False), ("int4", False), ("int4", True)])
def test_byte_count_from_the_shape_equals_the_tensors(fmt, sym):
    for shape in [(48, 96), (4, 40, 200), (7, 33)]:
        p = F.quantize(weight(shape), fmt, symmetric=sym)
        assert F.quantized_nbytes(shape, fmt, symmetric=sym) == p.nbytes


def test_chunked_quantization_equals_one_pass(monkeypatch):
    w = weight((3, 40, 200))
    whole = F.quantize(w, "int4")
    monkeypatch.setattr(F, "CHUNK_ELEMS", 7 * 200)  # 7 rows per chunk: chunks end mid-expert
    chunked = F.quantize(w, "int4")
    assert torch.equal(whole.qweight, chunked.qweight) and torch.equal(whole.zero, chunked.zero)
    assert torch.equal(whole.scale, chunked.scale)


@pytest.mark.parametrize("fmt,sym", [("int8", False), ("fp8", False), ("int4", False), ("int4", True)])
def test_oracle_reads_the_layout_as_dequantize_does(fmt, sym):
    """The kernel's oracle decodes the stored bytes on its own; on an identity input it must give the weights."""
    w = weight((2, 24, 200))
    p = F.quantize(w, fmt, symmetric=sym)
    eye = torch.eye(200)
    x = torch.cat([eye, eye])  # 200 rows per expert
    out = moe_quant_reference(x, p.qweight, p.scale, p.zero, fmt, torch.tensor([200, 400]), p.group_size)
    torch.testing.assert_close(out.view(2, 200, 24).transpose(1, 2), F.dequantize(p), rtol=1e-6, atol=1e-7)


def test_fp8_activation_quantization_is_per_token():
    x = torch.tensor([[1.0, 0.5, 3.0], [1000.0, -7.0, 2.0]])
    y = F.fake_quant_fp8_per_token(x)
    assert float(y[0].sub(x[0]).abs().max()) < 0.1  # a large row does not swamp a small one
    assert float((y - x).abs().div(x.abs()).max()) <= 2**-4
