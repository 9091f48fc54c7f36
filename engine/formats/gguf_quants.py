"""ggml block formats in torch: dequantize packed rows (F32, F16, BF16, Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) on any
device, bit-equal to `gguf.quants.dequantize` (same fp32 operations in the same order); and simple quantizers for
Q4_K, Q5_K and Q6_K (gguf-py has none) that write the same block layouts, for tests and benchmarks.

Layouts (ggml-common.h; ../shared/GGUF.md §3): a row of K values is K / block_size blocks of type_size bytes; fp16
fields are little-endian IEEE half.
  Q8_0 (32, 34):  d f16 | qs[32] int8                          value d*q
  Q5_0 (32, 22):  d f16 | qh u32 (bit j = 5th bit of elem j) | qs[16] (elem j low nibble, j+16 high)   d*(q-16)
  Q5_1 (32, 24):  d f16 | m f16 | qh | qs                       d*q + m
  Q4_K (256, 144): d | dmin | scales[12] (8 6-bit scales and mins) | qs[128]    (d*sc_j)*q - dmin*m_j
  Q5_K (256, 176): d | dmin | scales[12] | qh[32] (bit j of byte l: 5th bit of sub-block j's elem l) | qs[128]
  Q6_K (256, 210): ql[128] | qh[64] | scales[16] int8 | d f16 (last)          (d*sc)*(q-32)
K-quant sub-block order: chunk c of 32 bytes of qs holds sub-block 2c in its low nibbles, 2c+1 in its high ones.
"""

from __future__ import annotations

import torch

# ggml type name -> (elements per block, bytes per block); the types this engine reads
BLOCKS: dict[str, tuple[int, int]] = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q5_0": (32, 22), "Q5_1": (32, 24),
    "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210),
}
QK_K = 256


def row_bytes(qtype: str, k: int) -> int:
    block, size = BLOCKS[qtype]
    if k % block:
        raise ValueError(f"a {qtype} row needs a multiple of {block} values, got {k}")
    return k // block * size


def _f16(b: torch.Tensor) -> torch.Tensor:
    """(n, 2) uint8 -> (n, 1) fp32."""
    return b.contiguous().view(torch.float16).float()


def _shifts(values: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8, device=device)


def _bits32(qh: torch.Tensor) -> torch.Tensor:
    """(n, 4) uint8, a little-endian u32 -> (n, 32) uint8: bit j of the u32 at column j."""
    return ((qh[:, :, None] >> _shifts(list(range(8)), qh.device)) & 1).reshape(-1, 32)


def _nibbles32(qs: torch.Tensor) -> torch.Tensor:
    """(n, 16) uint8 -> (n, 32): low nibbles then high nibbles."""
    return torch.cat([qs & 0x0F, qs >> 4], dim=-1)


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return b[:, 2:].contiguous().view(torch.int8).float() * _f16(b[:, :2])


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    q = (_nibbles32(b[:, 6:]) | (_bits32(b[:, 2:6]) << 4)).to(torch.int8) - 16
    return _f16(b[:, :2]) * q.float()


def _q5_1(b: torch.Tensor) -> torch.Tensor:
    q = (_nibbles32(b[:, 8:]) | (_bits32(b[:, 4:8]) << 4)).float()
    return _f16(b[:, :2]) * q + _f16(b[:, 2:4])


def _scale_min_k4(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, 12) packed 6-bit scales and mins -> (n, 8) each (get_scale_min_k4)."""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=-1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=-1)
    return sc, mn


def _low_high(qs: torch.Tensor) -> torch.Tensor:
    """(n, 128) K-quant nibbles -> (n, 8, 32): chunk c's low nibbles are sub-block 2c, its high ones 2c+1."""
    n = qs.shape[0]
    return ((qs.reshape(n, 4, 1, 32) >> _shifts([0, 4], qs.device).reshape(1, 1, 2, 1)) & 0x0F).reshape(n, 8, 32)


def _q4_k(b: torch.Tensor, qh: torch.Tensor | None = None) -> torch.Tensor:
    n = b.shape[0]
    sc, mn = _scale_min_k4(b[:, 4:16])
    d = (_f16(b[:, 0:2]) * sc.float()).reshape(n, 8, 1)
    dm = (_f16(b[:, 2:4]) * mn.float()).reshape(n, 8, 1)
    q = _low_high(b[:, -128:])
    if qh is not None:
        q = q | (((qh.reshape(n, 1, 32) >> _shifts(list(range(8)), qh.device).reshape(1, 8, 1)) & 1) << 4)
    return (d * q.float() - dm).reshape(n, QK_K)


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    return _q4_k(b, b[:, 16:48])


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    ql, qh, scales = b[:, :128], b[:, 128:192], b[:, 192:208]
    d = (_f16(b[:, 208:210]) * scales.contiguous().view(torch.int8).float()).reshape(n, 16, 1)
    lo = ((ql.reshape(n, 2, 1, 64) >> _shifts([0, 4], b.device).reshape(1, 1, 2, 1)) & 0x0F).reshape(n, 8, 32)
    hi = ((qh.reshape(n, 2, 1, 32) >> _shifts([0, 2, 4, 6], b.device).reshape(1, 1, 4, 1)) & 0x03).reshape(n, 8, 32)
    q = ((lo | (hi << 4)).to(torch.int8) - 32).reshape(n, 16, 16).float()
    return (d * q).reshape(n, QK_K)


_BLOCK_FNS = {"Q8_0": _q8_0, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}
# Values dequantized per chunk: bounds the temporaries (~30 bytes of int/fp32 per value, ~8 MB) whatever the tensor's
# size and block size (a chunk counted in blocks grew with the block size; `python -m bench.gguf` reports
# host_mb_beyond_served).
CHUNK_VALUES = 1 << 18


def dequantize(data: torch.Tensor, qtype: str, k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Packed rows data (..., row_bytes) uint8 of ggml type `qtype` -> (..., k) in `dtype` (computed in fp32)."""
    if qtype not in BLOCKS:
        raise ValueError(f"ggml type {qtype} is not supported; supported: {', '.join(BLOCKS)}")
    if data.dtype != torch.uint8 or data.shape[-1] != row_bytes(qtype, k):
        raise ValueError(f"{qtype}: expected uint8 rows of {row_bytes(qtype, k)} bytes for {k} values, got "
                         f"{data.dtype} {tuple(data.shape)}")
    lead = data.shape[:-1]
    if qtype in ("F32", "F16", "BF16"):
        dt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[qtype]
        return data.contiguous().view(dt).to(dtype).reshape(*lead, k)
    block, size = BLOCKS[qtype]
    blocks = data.reshape(-1, size)
    out = torch.empty(blocks.shape[0], block, dtype=dtype, device=data.device)
    fn = _BLOCK_FNS[qtype]
    step = max(1, CHUNK_VALUES // block)
    for b0 in range(0, blocks.shape[0], step):
        out[b0:b0 + step] = fn(blocks[b0:b0 + step]).to(dtype)
    return out.reshape(*lead, k)


# -- quantizers for the K-quants (tests and benchmarks; not llama.cpp's iterative search, the same layouts) ---------
def _f16_bytes(x: torch.Tensor) -> torch.Tensor:
    """(n,) fp32 -> (n, 2) uint8."""
    return x.to(torch.float16).reshape(-1, 1).view(torch.uint8)


def _pack_scale_min_k4(sc: torch.Tensor, mn: torch.Tensor) -> torch.Tensor:
    """(n, 8) 6-bit scales and mins -> (n, 12), the inverse of `_scale_min_k4`."""
    d = (sc[:, :4] & 0x3F) | ((sc[:, 4:] >> 4) << 6)
    m = (mn[:, :4] & 0x3F) | ((mn[:, 4:] >> 4) << 6)
    md = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    return torch.cat([d, m, md], dim=-1)


def _quantize_kx(x: torch.Tensor, bits: int) -> torch.Tensor:
    """(n, 256) fp32 -> Q4_K (bits=4) or Q5_K (bits=5) blocks (n, 144 | 176)."""
    n = x.shape[0]
    top = (1 << bits) - 1
    sub = x.reshape(n, 8, 32)
    lo = sub.amin(-1).clamp_max(0)  # a sub-block's min is -dmin*m (m >= 0): keep 0 in range
    scale = (sub.amax(-1) - lo) / top  # (n, 8) per sub-block step
    d = (scale.amax(-1) / 63).to(torch.float16).float()  # 6-bit sub-scales, rounded up below
    dmin = ((-lo).amax(-1) / 63).to(torch.float16).float()
    safe = lambda v: torch.where(v > 0, v, torch.ones_like(v))  # noqa: E731
    sc = torch.ceil(scale / safe(d)[:, None]).clamp(0, 63)
    mn = torch.ceil(-lo / safe(dmin)[:, None]).clamp(0, 63)
    step, offset = (d[:, None] * sc)[..., None], (dmin[:, None] * mn)[..., None]
    q = torch.round((sub + offset) / torch.where(step > 0, step, torch.ones_like(step))).clamp(0, top).to(torch.uint8)
    ql = q & 0x0F  # (n, 8, 32)
    qs = (ql[:, 0::2] | (ql[:, 1::2] << 4)).reshape(n, 128)
    head = [_f16_bytes(d), _f16_bytes(dmin), _pack_scale_min_k4(sc.to(torch.uint8), mn.to(torch.uint8))]
    if bits == 5:
        hb = (q >> 4) << torch.arange(8, dtype=torch.uint8, device=x.device).reshape(1, 8, 1)  # (n, 8, 32)
        head.append(hb.sum(1, dtype=torch.uint8))  # bit j of byte l = 5th bit of sub-block j's elem l
    return torch.cat([*head, qs], dim=-1)


def _quantize_q6_k(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    sub = x.reshape(n, 16, 16)
    amax = sub.abs().amax(-1)  # (n, 16)
    d = (amax.amax(-1) / (31 * 127)).to(torch.float16).float()  # (n,)
    sc = torch.ceil(amax / (31 * torch.where(d > 0, d, torch.ones_like(d)))[:, None]).clamp(0, 127)
    step = (d[:, None] * sc)[..., None]
    q = (torch.round(sub / torch.where(step > 0, step, torch.ones_like(step))).clamp(-32, 31) + 32).to(torch.uint8)
    q = q.reshape(n, 2, 4, 32)  # half h, quarter j (y[l + 32j]), l
    lo, hi = q & 0x0F, q >> 4
    ql = torch.cat([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], dim=-1)  # (n, 2, 64)
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)  # (n, 2, 32)
    scales = sc.to(torch.int8).view(torch.uint8)
    return torch.cat([ql.reshape(n, 128), qh.reshape(n, 64), scales, _f16_bytes(d)], dim=-1)


def quantize_k(w: torch.Tensor, qtype: str) -> torch.Tensor:
    """Float (..., K) with K a multiple of 256 -> packed (..., row_bytes) uint8 in Q4_K, Q5_K or Q6_K."""
    k = w.shape[-1]
    fns = {"Q4_K": lambda b: _quantize_kx(b, 4), "Q5_K": lambda b: _quantize_kx(b, 5), "Q6_K": _quantize_q6_k}
    if qtype not in fns:
        raise ValueError(f"quantize_k: {qtype} is not a K-quant this module writes ({', '.join(fns)})")
    blocks = w.reshape(-1, QK_K).float()
    return fns[qtype](blocks).reshape(*w.shape[:-1], row_bytes(qtype, k))


def _round_away(x: torch.Tensor) -> torch.Tensor:
    """Round half away from zero, as gguf-py's `np_roundf` (torch.round rounds half to even)."""
    a = x.abs()
    floored = a.floor()
    return x.sign() * (floored + (2 * (a - floored)).floor())


def quantize_q8_0(w: torch.Tensor) -> torch.Tensor:
    """Float (..., K) with K a multiple of 32 -> packed Q8_0 rows (..., K / 32 * 34) uint8, on w's device; the
    same bytes as gguf-py's quantizer (f16 scale amax / 127, then the values times its reciprocal, rounded)."""
    k = w.shape[-1]
    if k % 32:
        raise ValueError(f"Q8_0 needs rows of whole 32-value blocks, got {k}")
    blocks = w.reshape(-1, 32).float()
    d = blocks.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    qs = _round_away(blocks * inv).to(torch.int8).view(torch.uint8)
    return torch.cat([_f16_bytes(d), qs], dim=-1).reshape(*w.shape[:-1], row_bytes("Q8_0", k))
