"""Triton kernel: grouped MoE GEMM over ggml-packed expert weights (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), decoding
the blocks of each weight tile in registers, so the weights stream from memory at their GGUF size.

out[r] = x[r] @ dequant(W[e]).T for the rows r of expert e, rows sorted by expert with `offsets` (E,) the cumulative
row ends (engine.model.moe.grouped_linear's contract; a plain linear is one expert). The programs and their (expert, row
block) table are those of engine.kernels.moe_quant. One K step is 32 values: one Q8_0/Q5_x block, or one 32-value
sub-block of a 256-value K-quant block, whose scale, min and high bits are read from the block's header bytes (layouts
in engine.formats.gguf_quants). fp16 fields are decoded with integer ops, as moe_quant decodes fp8. The eager oracle
is `gguf_moe_reference`: the torch dequantizer (bit-equal to gguf-py's) and a matmul per expert.
"""

from __future__ import annotations

import torch

from engine.formats.gguf_quants import BLOCKS, dequantize
from engine.kernels.moe_quant import block_table
from engine.quant.formats import QuantParts

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs
    triton = None

QTYPE_CODE = {"Q8_0": 0, "Q5_0": 1, "Q5_1": 2, "Q4_K": 3, "Q5_K": 4, "Q6_K": 5}
BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 32

if triton is not None:

    @triton.jit
    def _u8(ptr, mask):
        return tl.load(ptr, mask=mask, other=0).to(tl.int32)

    @triton.jit
    def _f16(ptr, mask):
        # two little-endian bytes of an IEEE half -> fp32 (normal: (1024 + m) * 2**(e - 25); subnormal: m * 2**-24)
        bits = _u8(ptr, mask) | (_u8(ptr + 1, mask) << 8)
        ex = (bits >> 10) & 31
        man = (bits & 1023).to(tl.float32)
        val = tl.where(ex == 0, man * 5.960464477539063e-08, (1024.0 + man) * tl.exp2((ex - 25).to(tl.float32)))
        return tl.where(((bits >> 15) & 1) == 1, -val, val)

    @triton.jit
    def _weights(base, i, mask, QTYPE: tl.constexpr):
        """(BN, BK) fp32 weights; base: each value's block start pointer, i: its index in the block."""
        if QTYPE == 0:  # Q8_0: d | qs[32] int8
            q = _u8(base + 2 + i, mask)
            w = (q - 256 * (q >= 128).to(tl.int32)).to(tl.float32) * _f16(base, mask)
        elif QTYPE == 1 or QTYPE == 2:  # Q5_0: d | qh u32 | qs[16]; Q5_1: d | m | qh | qs[16]
            if QTYPE == 1:
                qh_at = 2
            else:
                qh_at = 4
            hb = (_u8(base + qh_at + i // 8, mask) >> (i % 8)) & 1
            qs = _u8(base + qh_at + 4 + i % 16, mask)
            q = (tl.where(i < 16, qs & 15, qs >> 4) | (hb << 4)).to(tl.float32)
            if QTYPE == 1:
                w = _f16(base, mask) * (q - 16.0)
            else:
                w = _f16(base, mask) * q + _f16(base + 2, mask)
        elif QTYPE == 3 or QTYPE == 4:  # Q4_K / Q5_K: d | dmin | scales[12] | (qh[32]) | qs[128]
            j = i // 32
            ln = i % 32
            a = _u8(base + 4 + j, mask)  # scales[j]
            b = _u8(base + 8 + j, mask)  # scales[j + 4]
            c = _u8(base + 4 + j % 4, mask)  # scales[j - 4] for j >= 4
            sc = tl.where(j < 4, a & 63, (b & 15) | ((c >> 6) << 4)).to(tl.float32)
            mn = tl.where(j < 4, b & 63, (b >> 4) | ((a >> 6) << 4)).to(tl.float32)
            if QTYPE == 3:
                q = (_u8(base + 16 + 32 * (j // 2) + ln, mask) >> (4 * (j % 2))) & 15
            else:
                q = (_u8(base + 48 + 32 * (j // 2) + ln, mask) >> (4 * (j % 2))) & 15
                q = q | (((_u8(base + 16 + ln, mask) >> j) & 1) << 4)
            w = (_f16(base, mask) * sc) * q.to(tl.float32) - _f16(base + 2, mask) * mn
        else:  # Q6_K: ql[128] | qh[64] | scales[16] int8 | d
            h = i // 128
            r = i % 128
            qq = r // 32
            ln = r % 32
            lo = (_u8(base + 64 * h + ln + 32 * (qq % 2), mask) >> (4 * (qq // 2))) & 15
            hi = (_u8(base + 128 + 32 * h + ln, mask) >> (2 * qq)) & 3
            s = _u8(base + 192 + 8 * h + ln // 16 + 2 * qq, mask)
            sc = (s - 256 * (s >= 128).to(tl.int32)).to(tl.float32)
            w = (_f16(base + 208, mask) * sc) * ((lo | (hi << 4)) - 32).to(tl.float32)
        return w

    @triton.jit
    def _gguf_moe_kernel(
        x_ptr,  # (S, K) fp32/bf16/fp16, unit stride along K
        q_ptr,  # (E, N, row_bytes) uint8 ggml blocks
        out_ptr,  # (S, N) in x's dtype
        block_expert_ptr, block_row_ptr, ends_ptr,  # as in moe_quant
        N, K,
        stride_xm, stride_qe, stride_qn, stride_om,
        QTYPE: tl.constexpr, QK: tl.constexpr, TSIZE: tl.constexpr, FP32_DOT: tl.constexpr,
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
        q_row = q_ptr + e.to(tl.int64) * stride_qe + cols[:, None].to(tl.int64) * stride_qn  # (BN, 1)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            kmask = ks < K
            x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + ks[None, :],
                        mask=rmask[:, None] & kmask[None, :], other=0.0)  # (BM, BK)
            wmask = nmask[:, None] & kmask[None, :]
            base = q_row + ((ks // QK) * TSIZE)[None, :]
            w = _weights(base, (ks % QK)[None, :], wmask, QTYPE)  # (BN, BK)
            if FP32_DOT:
                acc += tl.dot(x.to(tl.float32), tl.trans(w), input_precision="ieee")
            else:
                acc += tl.dot(x, tl.trans(w.to(x.dtype)))
        out = out_ptr + rows[:, None].to(tl.int64) * stride_om + cols[None, :]
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & nmask[None, :])


def gguf_moe_linear(x: torch.Tensor, w: QuantParts, offsets: torch.Tensor) -> torch.Tensor:
    """x (S, K) sorted by expert, w "gguf:<TYPE>" parts (E, N, K), offsets (E,) cumulative row ends -> (S, N)."""
    if triton is None:
        raise RuntimeError("Triton is not installed: use the torch path (QuantWeight dequantizes per call)")
    qtype = w.fmt.removeprefix("gguf:")
    assert qtype in QTYPE_CODE, f"unsupported ggml type {w.fmt}"
    assert x.dim() == 2 and x.stride(-1) == 1, "x must be (S, K) with unit stride along K"
    assert len(w.shape) == 3 and x.shape[1] == w.shape[2], f"x {tuple(x.shape)} does not match weight {w.shape}"
    assert offsets.shape == (w.shape[0],), f"offsets must be ({w.shape[0]},)"
    qk, tsize = BLOCKS[qtype]
    assert w.qweight.dtype == torch.uint8 and w.qweight.shape[-1] == w.shape[2] // qk * tsize, "bad packed rows"
    assert w.qweight.stride(-1) == 1, "packed rows must be contiguous"
    s_rows, k = x.shape
    e, n, _ = w.shape
    out = torch.empty(s_rows, n, dtype=x.dtype, device=x.device)
    if s_rows == 0:
        return out
    block_expert, block_row = block_table(offsets, s_rows, BLOCK_M)
    grid = (block_expert.shape[0], triton.cdiv(n, BLOCK_N))
    q = w.qweight
    _gguf_moe_kernel[grid](
        x, q, out, block_expert, block_row, offsets.to(torch.int32), n, k,
        x.stride(0), q.stride(0), q.stride(1), out.stride(0),
        QTYPE=QTYPE_CODE[qtype], QK=qk, TSIZE=tsize, FP32_DOT=x.dtype == torch.float32,
        BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K,
    )
    return out


def gguf_moe_reference(x: torch.Tensor, w: QuantParts, offsets: torch.Tensor) -> torch.Tensor:
    """The eager oracle: each expert's weight dequantized by engine.formats.gguf_quants, one matmul per expert."""
    wd = dequantize(w.qweight, w.fmt.removeprefix("gguf:"), w.shape[-1])  # (E, N, K) fp32
    out = torch.empty(x.shape[0], w.shape[1], dtype=torch.float32, device=x.device)
    start = 0
    for e, end in enumerate(offsets.tolist()):
        out[start:end] = x[start:end].float() @ wd[e].T
        start = end
    return out.to(x.dtype)


def max_rel_errs(dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16), seed: int = 0,
                 qtypes: tuple[str, ...] = tuple(QTYPE_CODE)) -> dict[str, float]:
    """The kernel against `gguf_moe_reference` on random blocks (finite fp16 scales) of each type in `qtypes` (all by
    default): a ragged expert stack (N = 40 over tiles of 32, an empty expert) and a one-expert linear, per activation
    dtype. Run it where Triton runs: a GPU, or TRITON_INTERPRET=1 set before triton is imported (fp32 and fp16 only
    there)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for qtype in qtypes:
        qk, size = BLOCKS[qtype]
        for name, e, n, k, rows in (("experts", 3, 40, 2 * max(qk, 64), (5, 0, 17)), ("linear", 1, 24, 256, (11,))):
            raw = rng.integers(0, 256, (e * n * (k // qk), size), dtype=np.uint8)
            for at in {"Q6_K": [208], "Q8_0": [0], "Q5_0": [0]}.get(qtype, [0, 2]):
                raw[:, at:at + 2] = (rng.standard_normal((raw.shape[0], 1)) * 0.05).astype(np.float16).view(np.uint8)
            dev = "cuda" if torch.cuda.is_available() else "cpu"
            w = QuantParts(f"gguf:{qtype}", (e, n, k), torch.from_numpy(raw).reshape(e, n, -1).to(dev), torch.empty(0))
            offsets = torch.tensor(np.cumsum(rows), dtype=torch.int32, device=dev)
            for dt in dtypes:
                x = torch.randn(sum(rows), k, generator=torch.Generator().manual_seed(1)).to(dev, dt)
                got, want = gguf_moe_linear(x, w, offsets).float(), gguf_moe_reference(x.float(), w, offsets)
                out[f"{qtype}/{name}/{str(dt).removeprefix('torch.')}"] = float((got - want).abs().max()
                                                                              / want.abs().max())
    return out
