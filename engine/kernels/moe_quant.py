"""Triton kernel: grouped MoE GEMM over quantized expert weights (int8, int4, fp8), dequantizing tiles on the fly.

out[r] = x[r] @ dequant(W[e]).T for the rows r of expert e. Rows come sorted by expert with `offsets` (E,) the
cumulative row ends, as `engine.model.moe.grouped_linear` gets them. One program computes a (BM, BN) output
tile of one
expert: its weight tile (BN, BK) is loaded in the stored format (1 byte per int8/fp8 weight, half a byte per int4
weight, plus its scales) and dequantized in registers, so the weights stream from memory at their quantized size.
fp8 bytes are decoded with integer ops (sign, 4-bit exponent, 3-bit mantissa), which needs no fp8 support in the
GPU or in Triton's interpreter. A plain linear is one expert.

Programs map to (expert, row block) without a host sync: the block table is built on the device from `offsets`
with an upper bound of ceil(S / BM) + E blocks known from the shapes; spare programs exit at once.
The eager oracle is `reference.moe_quant_reference`; without Triton this module imports and the launcher raises.
"""

from __future__ import annotations

import torch

from engine.quant.formats import QuantParts

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs
    triton = None

FMT_CODE = {"int8": 0, "int4": 1, "fp8": 2}
BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 32

if triton is not None:

    @triton.jit
    def _fp8_e4m3_decode(b):
        # b: uint8 bits of float8_e4m3fn (as int32) -> fp32. Normal: (8 + m) * 2**(e - 10); subnormal: m * 2**-9.
        sign = (b >> 7) & 1
        ex = (b >> 3) & 15
        man = (b & 7).to(tl.float32)
        val = tl.where(ex == 0, man * 0.001953125, (8.0 + man) * tl.exp2((ex - 10).to(tl.float32)))
        return tl.where(sign == 1, -val, val)

    @triton.jit
    def _moe_quant_kernel(
        x_ptr,  # (S, K) fp32/bf16/fp16, unit stride along K
        q_ptr,  # (E, N, Kq) int8 | uint8 (packed int4 or fp8 bits)
        s_ptr,  # (E, N, G) scales (G = 1 for int8/fp8)
        z_ptr,  # (E, N, G) uint8 zero points (asymmetric int4) or a dummy
        out_ptr,  # (S, N) in x's dtype
        block_expert_ptr,  # (B,) int32, -1 for spare programs
        block_row_ptr,  # (B,) int32 first row of the block
        ends_ptr,  # (E,) int32 cumulative row ends
        N, K,
        stride_xm, stride_qe, stride_qn, stride_se, stride_sn, stride_om,
        FMT: tl.constexpr, HAS_ZERO: tl.constexpr, GROUP: tl.constexpr, FP32_DOT: tl.constexpr,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        e = tl.load(block_expert_ptr + pid_m)
        if e < 0:
            return
        row0 = tl.load(block_row_ptr + pid_m)
        end = tl.load(ends_ptr + e)
        rows = row0 + tl.arange(0, BM)
        rmask = rows < end
        cols = pid_n * BN + tl.arange(0, BN)
        nmask = cols < N
        q_base = q_ptr + e.to(tl.int64) * stride_qe + cols[:, None].to(tl.int64) * stride_qn  # (BN, 1)
        s_off = e.to(tl.int64) * stride_se + cols.to(tl.int64) * stride_sn  # (BN,) scales and zero points alike
        s_base = s_ptr + s_off[:, None]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            kmask = ks < K
            x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + ks[None, :],
                        mask=rmask[:, None] & kmask[None, :], other=0.0)  # (BM, BK)
            wmask = nmask[:, None] & kmask[None, :]
            if FMT == 1:  # int4: byte k // 2, low nibble for even k; scale/zero of group k // GROUP
                byte = tl.load(q_base + (ks // 2)[None, :], mask=wmask, other=0).to(tl.int32)
                q = ((byte >> ((ks % 2) * 4)[None, :]) & 15).to(tl.float32)
                s = tl.load(s_base + (ks // GROUP)[None, :], mask=wmask, other=0.0).to(tl.float32)
                if HAS_ZERO:
                    z = tl.load(z_ptr + s_off[:, None] + (ks // GROUP)[None, :], mask=wmask, other=0).to(tl.float32)
                else:
                    z = 8.0
                w = (q - z) * s  # (BN, BK)
            elif FMT == 0:  # int8: the per-row scale is applied once, after the K loop
                w = tl.load(q_base + ks[None, :], mask=wmask, other=0).to(tl.float32)
            else:  # fp8 e4m3 bits
                w = _fp8_e4m3_decode(tl.load(q_base + ks[None, :], mask=wmask, other=0).to(tl.int32))
            if FP32_DOT:
                acc += tl.dot(x.to(tl.float32), tl.trans(w), input_precision="ieee")
            else:
                acc += tl.dot(x, tl.trans(w.to(x.dtype)))
        if FMT != 1:
            acc = acc * tl.load(s_ptr + s_off, mask=nmask, other=0.0).to(tl.float32)[None, :]
        out = out_ptr + rows[:, None].to(tl.int64) * stride_om + cols[None, :]
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & nmask[None, :])


def block_table(offsets: torch.Tensor, rows: int, bm: int) -> tuple[torch.Tensor, torch.Tensor]:
    """offsets (E,) cumulative row ends -> (block_expert, block_row), each (ceil(rows / bm) + E,) int32, built on the
    device without reading the offsets on the host. Spare entries have expert -1."""
    e = offsets.shape[0]
    ends = offsets.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    nb = (ends - starts + bm - 1) // bm  # blocks per expert
    cum = torch.cumsum(nb, 0)
    b = torch.arange(-(-rows // bm) + e, device=offsets.device)
    expert = torch.searchsorted(cum, b, right=True)  # the expert whose block range holds b
    valid = expert < e
    ex = expert.clamp_max(e - 1)
    row = starts[ex] + (b - (cum[ex] - nb[ex])) * bm
    return torch.where(valid, ex, -1).to(torch.int32), torch.where(valid, row, 0).to(torch.int32)


def moe_quant_linear(x: torch.Tensor, w: QuantParts, offsets: torch.Tensor) -> torch.Tensor:
    """x (S, K) sorted by expert, w quantized (E, N, K), offsets (E,) int cumulative row ends -> (S, N), x's dtype."""
    if triton is None:
        raise RuntimeError("Triton is not installed: use the torch path (QuantWeight dequantizes on the CPU)")
    assert w.fmt in FMT_CODE, f"unsupported format {w.fmt}"
    assert x.dim() == 2 and x.stride(-1) == 1, "x must be (S, K) with unit stride along K"
    assert len(w.shape) == 3 and x.shape[1] == w.shape[2], f"x {tuple(x.shape)} does not match weight {w.shape}"
    assert offsets.shape == (w.shape[0],), f"offsets must be ({w.shape[0]},)"
    assert w.qweight.is_contiguous() and w.scale.is_contiguous(), "quantized parts must be contiguous"
    s_rows, k = x.shape
    e, n, _ = w.shape
    out = torch.empty(s_rows, n, dtype=x.dtype, device=x.device)
    if s_rows == 0:
        return out
    q = w.qweight if w.fmt != "fp8" else w.qweight.view(torch.uint8)
    block_expert, block_row = block_table(offsets, s_rows, BLOCK_M)
    zero = w.zero if w.zero is not None else w.scale
    grid = (block_expert.shape[0], triton.cdiv(n, BLOCK_N))
    _moe_quant_kernel[grid](
        x, q, w.scale, zero, out, block_expert, block_row, offsets.to(torch.int32),
        n, k, x.stride(0), q.stride(0), q.stride(1), w.scale.stride(0), w.scale.stride(1), out.stride(0),
        FMT=FMT_CODE[w.fmt], HAS_ZERO=w.zero is not None, GROUP=w.group_size, FP32_DOT=x.dtype == torch.float32,
        BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K,
    )
    return out
