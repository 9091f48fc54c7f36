"""Weight formats as pure tensor functions: quantize a float weight to int8 / int4 / fp8 parts, dequantize them back,
pack int4 nibbles, and count the bytes a format takes for a shape without allocating anything.

A weight is (..., N, K): N output channels, K input features; leading dims are experts. Formats:
- int8: symmetric per output channel, q in [-127, 127], one fp32 scale per row.
- int4: group-wise along K (groups of 128, the last group may be shorter), two nibbles per byte (low nibble = even
  column), one bf16 scale per group; asymmetric groups also store a uint8 zero point, symmetric ones use zero 8.
- fp8: e4m3 (float8_e4m3fn) per output channel, one fp32 scale per row (the compressed-tensors FP8-dynamic layout).
- gguf:<TYPE> (read from a GGUF file, never made here): qweight holds the packed ggml rows (..., N, row_bytes) uint8,
  scales inside the blocks (engine.formats.gguf_quants); `scale` is empty.
Scales are rounded (up) to their storage dtype before the weight is divided by them, so storing a scale adds no
error and clips nothing: every weight is within half a step of its stored value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

FORMATS = ("bf16", "int8", "int4", "fp8")  # "bf16": not quantized, kept in the compute dtype
QUANTIZED = ("int8", "int4", "fp8")
INT4_GROUP = 128
# Chosen by measurement (python -m bench.quant, "int4_variants"): on the shipped model asymmetric groups give a
# lower weight error and logit error than symmetric ones for 1 extra byte per 128 weights.
INT4_SYMMETRIC = False
FP8_MAX = 448.0  # largest finite float8_e4m3fn
SCALE_DTYPE = {"int8": torch.float32, "int4": torch.bfloat16, "fp8": torch.float32}
# Rows quantized per chunk: bounds the fp32 temporaries of one chunk to ~16 MB each whatever the tensor's size.
CHUNK_ELEMS = 1 << 22


@dataclass(frozen=True)
class QuantParts:
    """The stored tensors of one quantized weight of logical shape `shape` = (..., N, K).

    qweight: int8 (..., N, K) | uint8 (..., N, ceil(K/2)) packed int4 | float8_e4m3fn (..., N, K)
    scale:   fp32 (..., N, 1) for int8/fp8 | bf16 (..., N, ceil(K/group)) for int4
    zero:    uint8 (..., N, ceil(K/group)) for asymmetric int4, else None
    act_dynamic: fp8 only: activations are fake-quantized to e4m3 per token (compressed-tensors FP8-dynamic).
    """

    fmt: str
    shape: tuple[int, ...]
    qweight: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None = None
    group_size: int = INT4_GROUP
    act_dynamic: bool = False

    @property
    def nbytes(self) -> int:
        zero = self.zero.nbytes if self.zero is not None else 0
        return self.qweight.nbytes + self.scale.nbytes + zero

    def to(self, device: torch.device | str) -> QuantParts:
        z = self.zero.to(device) if self.zero is not None else None
        return QuantParts(self.fmt, self.shape, self.qweight.to(device), self.scale.to(device), z, self.group_size,
                          self.act_dynamic)


def quantized_nbytes(shape: tuple[int, ...], fmt: str, compute_bytes: int = 2, symmetric: bool = INT4_SYMMETRIC,
                     group_size: int = INT4_GROUP) -> int:
    """Bytes a weight of `shape` takes in `fmt` (scales and zero points included); "bf16" = compute_bytes each."""
    if fmt == "bf16":
        return math.prod(shape) * compute_bytes
    *lead, n, k = shape
    rows = math.prod(lead) * n
    if fmt in ("int8", "fp8"):
        return rows * k + rows * 4
    if fmt == "int4":
        groups = -(-k // group_size)
        return rows * (-(-k // 2)) + rows * groups * (2 if symmetric else 3)
    raise ValueError(f"unknown weight format {fmt!r}; expected one of {FORMATS}")


# -- int4 nibble packing ----------------------------------------------------------------------------------------
def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """(..., K) uint8 values in [0, 15] -> (..., ceil(K/2)) uint8, column 2j in the low nibble of byte j."""
    if q.shape[-1] % 2:
        q = torch.nn.functional.pad(q, (0, 1))
    return q[..., 0::2] | (q[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor, k: int) -> torch.Tensor:
    """(..., ceil(K/2)) uint8 -> (..., K) uint8 in [0, 15]."""
    out = torch.stack([packed & 0xF, packed >> 4], dim=-1)  # (..., K2, 2)
    return out.flatten(-2)[..., :k]


# -- quantize one chunk of rows (R, K) in fp32 ---------------------------------------------------------------------
def _int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
    scale = (w.abs().amax(-1, keepdim=True) / 127).clamp_min(torch.finfo(torch.float32).tiny)  # (R, 1)
    return torch.round(w / scale).clamp_(-127, 127).to(torch.int8), scale, None


def _fp8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
    scale = (w.abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(torch.finfo(torch.float32).tiny)
    return (w / scale).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale, None


def _bf16_up(x: torch.Tensor) -> torch.Tensor:
    """fp32 scales -> bf16, rounded up: the stored scale never shrinks the range, so no value clips."""
    s = x.to(torch.bfloat16)
    return torch.where(s.float() < x, torch.nextafter(s, torch.full_like(s, float("inf"))), s)


def _int4_rows(w: torch.Tensor, symmetric: bool, g: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    r, k = w.shape
    groups = -(-k // g)
    wg = torch.nn.functional.pad(w, (0, groups * g - k)).view(r, groups, g)  # zero padding: 0 is always in range
    tiny = torch.finfo(torch.bfloat16).tiny
    if symmetric:
        scale = _bf16_up((wg.abs().amax(-1) / 7).clamp_min(tiny))  # (R, G)
        q = torch.round(wg / scale.float()[..., None]).clamp_(-8, 7) + 8
        zero = None
    else:
        lo, hi = wg.amin(-1).clamp_max(0), wg.amax(-1).clamp_min(0)
        scale = _bf16_up(((hi - lo) / 15).clamp_min(tiny))
        zero_f = torch.round(-lo / scale.float()).clamp_(0, 15)
        q = (torch.round(wg / scale.float()[..., None]) + zero_f[..., None]).clamp_(0, 15)
        zero = zero_f.to(torch.uint8)
    q = q.to(torch.uint8).view(r, groups * g)[:, :k]
    return pack_int4(q), scale, zero


def quantize(w: torch.Tensor, fmt: str, device: torch.device | str | None = None, *,
             symmetric: bool = INT4_SYMMETRIC, group_size: int = INT4_GROUP) -> QuantParts:
    """Float weight (..., N, K), on any device -> QuantParts on `device` (default: w's).

    Rows are quantized in chunks on the target device, so the temporaries stay small and the output buffers are the
    only full-size allocations."""
    if fmt not in QUANTIZED:
        raise ValueError(f"cannot quantize to {fmt!r}; expected one of {QUANTIZED}")
    if w.dim() < 2:
        raise ValueError(f"a quantized weight needs >= 2 dims, got shape {tuple(w.shape)}")
    device = torch.device(device) if device is not None else w.device
    shape = tuple(w.shape)
    k = shape[-1]
    rows = w.reshape(-1, k)
    n_rows = rows.shape[0]
    groups = -(-k // group_size)
    if fmt == "int4":
        q = torch.empty(n_rows, -(-k // 2), dtype=torch.uint8, device=device)
        scale = torch.empty(n_rows, groups, dtype=torch.bfloat16, device=device)
        zero = None if symmetric else torch.empty(n_rows, groups, dtype=torch.uint8, device=device)
    else:
        q = torch.empty(n_rows, k, dtype=torch.int8 if fmt == "int8" else torch.float8_e4m3fn, device=device)
        scale = torch.empty(n_rows, 1, dtype=torch.float32, device=device)
        zero = None
    step = max(1, CHUNK_ELEMS // max(k, 1))
    for r0 in range(0, n_rows, step):
        chunk = rows[r0:r0 + step].to(device=device, dtype=torch.float32)
        if fmt == "int8":
            cq, cs, cz = _int8_rows(chunk)
        elif fmt == "fp8":
            cq, cs, cz = _fp8_rows(chunk)
        else:
            cq, cs, cz = _int4_rows(chunk, symmetric, group_size)
        q[r0:r0 + step], scale[r0:r0 + step] = cq, cs
        if zero is not None:
            zero[r0:r0 + step] = cz
    lead = shape[:-1]
    return QuantParts(fmt, shape, q.view(*lead, -1), scale.view(*lead, -1),
                      zero.view(*lead, -1) if zero is not None else None, group_size)


def dequantize(p: QuantParts, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """QuantParts -> float weight (..., N, K) in `dtype` (computed in fp32)."""
    k = p.shape[-1]
    if p.fmt.startswith("gguf:"):  # packed ggml blocks, as a GGUF file stores them (engine.formats.gguf)
        from engine.formats.gguf_quants import dequantize as dequantize_blocks

        return dequantize_blocks(p.qweight, p.fmt.removeprefix("gguf:"), k, dtype)
    if p.fmt in ("int8", "fp8"):
        w = p.qweight.float().mul_(p.scale.float())
    elif p.fmt == "int4":
        groups, g = p.scale.shape[-1], p.group_size
        q = unpack_int4(p.qweight, k)  # (..., N, K) uint8
        if groups * g != k:  # a short last group: pad to whole groups, sliced off below
            q = torch.nn.functional.pad(q, (0, groups * g - k))
        q = q.unflatten(-1, (groups, g)).float()  # (..., N, G, g): scale and zero broadcast over each group
        zero = p.zero.float()[..., None] if p.zero is not None else 8.0
        w = q.sub_(zero).mul_(p.scale.float()[..., None]).flatten(-2)[..., :k]
    else:
        raise ValueError(f"unknown quantized format {p.fmt!r}")
    return w.to(dtype)


def fake_quant_fp8_per_token(x: torch.Tensor) -> torch.Tensor:
    """FP8-dynamic activations: each row of x (..., K) rounded to e4m3 with its own absmax scale, back in x's dtype."""
    xf = x.float()
    s = (xf.abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(torch.finfo(torch.float32).tiny)
    return ((xf / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
