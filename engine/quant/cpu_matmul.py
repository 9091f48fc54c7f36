"""CPU matmuls on quantized weights without expanding the whole weight. Two ways:

- native (ggml types, where `engine.quant.native` builds: a C compiler is present and DG_NATIVE is not 0): the
  weight's stored rows are read in place (no copy: a GGUF's map), and for up to FUSED_ROWS rows of x each weight row
  is dequantized once, in L1, and multiplied with every row of x (`native.qmatmul`); for more rows of x, tiles of
  `TILE_VALUES` values are dequantized natively and go through torch's GEMM.
- torch (int8 / int4 / fp8, and ggml types where the native kernels are off): each weight is repacked once (at its
  first CPU call) into integer codes plus one scale (and bias) per group, and tiles are dequantized by torch into one
  reused fp32 buffer (it stays in cache) and multiplied with torch's GEMM.

An expert stack runs only the experts the router picked, each on its own rows.

Exact: a tile holds the very fp32 values `engine.quant.formats.dequantize` (and, for ggml blocks,
`gguf.quants.dequantize`) computes (same operations in the same order; the native kernels too, bit for bit), and
the GEMM is fp32 (x @ tile.T, F.linear's orientation), so torch-way outputs match the whole-weight path to fp32
summation order (bit for bit where MKL blocks a tile's columns as it blocks the whole weight's); the native
row-by-row product sums in its own order (1e-6 of the output's scale in tests/quant/test_native.py). Layouts of the
torch way (`CpuWeight`): q (R, K) int8 codes (Q4_K and int4: two per byte, `nibbles`), `scale` (R, K / group) and
optional `bias` (R, K / group); a value is q * scale + bias (int4: (q - zero) * scale, as its dequantizer).

  Q8_0  q int8, scale = d (f16)                 Q5_0  q - 16 int8, scale = d (f16)
  Q5_1  q int8, scale = d, bias = m (f16)       Q4_K  q nibbles, scale = d*sc, bias = -(dmin*m) (fp32), group 32
  Q5_K  q int8, as Q4_K                         Q6_K  q - 32 int8, scale = d*sc (fp32), group 16
  int8 / fp8  q as stored, scale per row        int4  nibbles as stored, (q - zero) * scale per group of 128
"""

from __future__ import annotations

import ctypes
import mmap
import os
from dataclasses import dataclass

import torch

from engine.formats import gguf_quants as GQ
from engine.quant.formats import QuantParts
from engine.quant.native import ops as native

# False: the whole-weight path (dequantize, then torch's dense GEMM), for `python -m bench.cpu_quant`'s before figure
ENABLED = True
# Rows of x up to which a natively read weight is multiplied row by row in cache (`native.qmatmul`); above, its
# dequantized tiles go through torch's GEMM (1 thread, AVX2, 1024 x 1024 weights: the row-by-row product was the
# faster up to 32 rows of x for Q4_K / Q6_K / Q8_0, the tiles from 64)
FUSED_ROWS = 32
# Values dequantized per tile: 256K fp32 values = 1 MB, which stays in a core's L2/L3 beside the activations.
TILE_VALUES = 1 << 18


@dataclass(frozen=True)
class CpuWeight:
    """A quantized weight (..., N, K) repacked for tiled CPU matmuls: rows R = prod(...) * N."""

    shape: tuple[int, ...]
    q: torch.Tensor  # (R, K) int8 / fp8 codes, or (R, K // 2) uint8 nibbles
    scale: torch.Tensor  # (R, K // group) fp32 / fp16 / bf16
    bias: torch.Tensor | None  # (R, K // group), added after the scale
    group: int
    nibbles: str = ""  # "" | "k" (K-quant order: low nibbles elems 0..15 of a group, high 16..31) | "int4"
    zero: torch.Tensor | None = None  # int4: (R, K // group) uint8 zero points
    ggml: str = ""  # a ggml type: q is the stored rows (R, row_bytes) uint8, dequantized natively (no scale/bias)
    int8: bool = False  # ggml: few-row products with x in 8 bits (`int8_activations`, decided once at packing)

    @property
    def rows(self) -> int:
        return self.q.shape[0]

    @property
    def k(self) -> int:
        return self.shape[-1]

    @property
    def nbytes(self) -> int:
        extra = sum(t.nbytes for t in (self.bias, self.zero) if t is not None)
        return self.q.nbytes + self.scale.nbytes + extra

    def dequant(self, lo: int, hi: int, out: torch.Tensor) -> torch.Tensor:
        """Rows lo:hi as fp32 (hi - lo, K), written into `out` (a buffer of at least that many rows)."""
        n, k, g = hi - lo, self.k, self.group
        if self.ggml:
            return native.dequant_rows(self.ggml, self.q, lo, hi, k, out)
        buf = out[:n]
        if self.nibbles == "int4":
            groups = self.scale.shape[-1]
            p = self.q[lo:hi]
            q = torch.stack([p & 0xF, p >> 4], dim=-1).flatten(-2)[:, :k]
            if groups * g != k:  # a short last group: padded like formats.dequantize, the padding never stored
                q = torch.nn.functional.pad(q, (0, groups * g - k))
                full = torch.empty(n, groups, g)
                full.copy_(q.view(n, groups, g))
                zero = self.zero[lo:hi].float()[..., None] if self.zero is not None else 8.0
                buf.copy_(full.sub_(zero).mul_(self.scale[lo:hi].float()[..., None]).flatten(-2)[:, :k])
                return buf
            view = buf.view(n, groups, g)
            view.copy_(q.view(n, groups, g))
            view.sub_(self.zero[lo:hi, :, None] if self.zero is not None else 8.0)
            view.mul_(self.scale[lo:hi, :, None].float())
            return buf
        view = buf.view(n, k // g, g)
        scale = self.scale[lo:hi, :, None]
        if self.nibbles == "k":
            p = self.q[lo:hi].view(n, k // g, g // 2)
            q = torch.cat([p & 0xF, p >> 4], dim=-1)
        else:
            q = self.q[lo:hi].view(n, k // g, g)
        if q.dtype == torch.float8_e4m3fn:
            view.copy_(q)
            view.mul_(scale)
        else:
            torch.mul(q, scale.float() if scale.dtype != torch.float32 else scale, out=view)
        if self.bias is not None:
            view.add_(self.bias[lo:hi, :, None])
        return buf

    def matmul_rows(self, x: torch.Tensor, lo: int, hi: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """x (M, K) fp32 -> (M, hi - lo): x times rows lo:hi of the weight, transposed, tile by tile (x @ tile.T,
        the orientation of F.linear), written into `out` if given."""
        m, n = x.shape[0], hi - lo
        if self.ggml and m <= FUSED_ROWS and self.k % 8 == 0:
            y = torch.empty(m, n, dtype=torch.float32) if out is None else out
            product = native.qmatmul_int8 if self.int8 else native.qmatmul
            return product(self.ggml, self.q, lo, hi, self.k, x.contiguous(), y)
        step = max(1, min(n, TILE_VALUES // self.k))
        buf = torch.empty(step, self.k, dtype=torch.float32)
        y = torch.empty(m, n, dtype=torch.float32) if out is None else out
        if step >= n:
            return torch.mm(x, self.dequant(lo, hi, buf).t(), out=y)
        for r in range(lo, hi, step):
            r2 = min(r + step, hi)
            y[:, r - lo:r2 - lo] = torch.mm(x, self.dequant(r, r2, buf).t())
        return y


def int8_activations(qtype: str, k: int) -> bool:
    """Whether few-row products with a `qtype` weight quantize x to 8 bits (`native.qmatmul_int8`, as llama.cpp
    does; read once, when a weight is packed at its first CPU call): DG_CPU_ACTIVATIONS=int8 (the default), for the
    K-quants (Q4_K, Q5_K, Q6_K; rows of a multiple of 256) where the library has the product (AVX2); =fp32 keeps x
    exact (`native.qmatmul`). bench.cpu_quant reports the error it adds (matmul_errors: ~0.8% of the largest
    output, against Q4_K's own ~8% and Q6_K's ~3%)."""
    if os.environ.get("DG_CPU_ACTIVATIONS", "int8") != "int8" or not native.int8_available(qtype):
        return False
    return k % 256 == 0


def _ggml_codes(blocks: torch.Tensor, qtype: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
    """(n, type_size) uint8 blocks -> codes (n, block) int8 | (n, block // 2) K-quant nibbles, scale, bias, group."""
    f16 = GQ._f16
    if qtype == "Q8_0":
        return blocks[:, 2:].contiguous().view(torch.int8), f16(blocks[:, :2]).half(), None, 32
    if qtype in ("Q5_0", "Q5_1"):
        at = 2 if qtype == "Q5_0" else 4
        q = GQ._nibbles32(blocks[:, at + 4:]) | (GQ._bits32(blocks[:, at:at + 4]) << 4)
        if qtype == "Q5_0":
            return q.to(torch.int8) - 16, f16(blocks[:, :2]).half(), None, 32
        return q.to(torch.int8), f16(blocks[:, :2]).half(), f16(blocks[:, 2:4]).half(), 32
    if qtype in ("Q4_K", "Q5_K"):
        n = blocks.shape[0]
        sc, mn = GQ._scale_min_k4(blocks[:, 4:16])
        scale = f16(blocks[:, 0:2]) * sc.float()  # (n, 8): the reference's d * sc
        bias = -(f16(blocks[:, 2:4]) * mn.float())
        q = GQ._low_high(blocks[:, -128:])  # (n, 8, 32)
        if qtype == "Q4_K":
            return (q[..., :16] | (q[..., 16:] << 4)).reshape(n, 128), scale, bias, 32
        qh = blocks[:, 16:48]
        q = q | (((qh.reshape(n, 1, 32) >> GQ._shifts(list(range(8)), qh.device).reshape(1, 8, 1)) & 1) << 4)
        return q.to(torch.int8).reshape(n, 256), scale, bias, 32
    if qtype == "Q6_K":
        n = blocks.shape[0]
        ql, qh, scales = blocks[:, :128], blocks[:, 128:192], blocks[:, 192:208]
        scale = f16(blocks[:, 208:210]) * scales.contiguous().view(torch.int8).float()  # (n, 16)
        lo = ((ql.reshape(n, 2, 1, 64) >> GQ._shifts([0, 4], blocks.device).reshape(1, 1, 2, 1)) & 0x0F)
        hi = ((qh.reshape(n, 2, 1, 32) >> GQ._shifts([0, 2, 4, 6], blocks.device).reshape(1, 1, 4, 1)) & 0x03)
        q = (lo.reshape(n, 8, 32) | (hi.reshape(n, 8, 32) << 4)).to(torch.int8) - 32
        return q.reshape(n, 256), scale, None, 16
    raise ValueError(f"no CPU tile layout for ggml type {qtype}")


MADV_PAGEOUT = 21  # Linux >= 5.4: reclaim these pages now (clean file pages are dropped, re-read on a later touch)


def page_out(t: torch.Tensor) -> None:
    """Ask the kernel to reclaim the whole pages under a CPU tensor: after a ggml weight is repacked, its bytes in the
    file's map are no longer read, so they need not stay resident. Never loses data (anonymous pages are at most
    swapped); a kernel without MADV_PAGEOUT leaves them, which only costs memory."""
    if t.device.type != "cpu" or t.numel() == 0:
        return
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    lo, hi = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, end // mmap.PAGESIZE * mmap.PAGESIZE
    if hi > lo:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), MADV_PAGEOUT)


def pack(p: QuantParts) -> CpuWeight:
    """QuantParts (any format the engine loads) -> its CpuWeight (a copy for ggml blocks, views otherwise)."""
    k = p.shape[-1]
    if p.fmt.startswith("gguf:"):
        qtype = p.fmt.removeprefix("gguf:")
        block, size = GQ.BLOCKS[qtype]
        raw = p.qweight.reshape(-1, p.qweight.shape[-1])
        if native.available(qtype):  # the stored rows, read in place (no copy)
            return CpuWeight(tuple(p.shape), raw, raw.new_empty(0), None, block, ggml=qtype,
                             int8=int8_activations(qtype, k))
        rows = raw.shape[0]
        qs, scales, biases = [], [], []
        step = max(1, GQ.CHUNK_VALUES // k)
        for r in range(0, rows, step):  # chunked: the unpacking temporaries stay small
            q, s, b, g = _ggml_codes(raw[r:r + step].reshape(-1, size), qtype)
            n = min(step, rows - r)
            qs.append(q.reshape(n, -1))
            scales.append(s.reshape(n, -1))
            if b is not None:
                biases.append(b.reshape(n, -1))
        packed = CpuWeight(tuple(p.shape), torch.cat(qs), torch.cat(scales), torch.cat(biases) if biases else None,
                           g, "k" if qtype == "Q4_K" else "")
        page_out(p.qweight)  # the map's pages of this weight (a copy-on-write map of the file: clean pages)
        return packed
    rows = p.qweight.reshape(-1, p.qweight.shape[-1])
    scale = p.scale.reshape(rows.shape[0], -1)
    if p.fmt in ("int8", "fp8"):
        return CpuWeight(tuple(p.shape), rows, scale, None, k)
    if p.fmt == "int4":
        zero = p.zero.reshape(rows.shape[0], -1) if p.zero is not None else None
        return CpuWeight(tuple(p.shape), rows, scale, None, p.group_size, "int4", zero)
    raise ValueError(f"no CPU tile layout for format {p.fmt}")


def linear(x: torch.Tensor, w: CpuWeight) -> torch.Tensor:
    """x (..., K) -> (..., N) for a 2D weight, in x's dtype (computed in fp32)."""
    flat = x.reshape(-1, x.shape[-1]).float()
    y = w.matmul_rows(flat, 0, w.rows)
    return y.view(*x.shape[:-1], -1).to(x.dtype)


def mix(p: torch.Tensor, w: CpuWeight) -> torch.Tensor:
    """p (..., R) @ W (R, K) -> (..., K) fp32 for a 2D weight: a weighted sum of its rows (self-conditioning's
    soft embedding through a quantized table), tile by tile."""
    flat = p.reshape(-1, p.shape[-1]).float()
    step = max(1, min(w.rows, TILE_VALUES // w.k))
    buf = torch.empty(step, w.k, dtype=torch.float32)
    out = torch.zeros(flat.shape[0], w.k, dtype=torch.float32)
    for r in range(0, w.rows, step):
        r2 = min(r + step, w.rows)
        out.addmm_(flat[:, r:r2], w.dequant(r, r2, buf))
    return out.view(*p.shape[:-1], w.k)


def grouped_linear(x: torch.Tensor, w: CpuWeight, offsets: torch.Tensor) -> torch.Tensor:
    """x (S, K) rows sorted by expert, offsets (E,) cumulative row ends -> (S, N): each expert that has rows
    multiplies its own rows; the others are never read."""
    n = w.shape[-2]
    xf = x.float()
    out = torch.empty(x.shape[0], n, dtype=torch.float32)
    start = 0
    for e, end in enumerate(offsets.tolist()):
        if end > start:
            w.matmul_rows(xf[start:end], e * n, (e + 1) * n, out[start:end])
        start = end
    return out.to(x.dtype)
