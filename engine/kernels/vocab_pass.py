"""Triton kernel: one read of each logits row gives its entropy, argmax and a Gumbel-max sample.

The unfused sampler (soft-cap, temperature, softmax, `Categorical.entropy`, `multinomial`, `argmax`) makes
several passes over an (R, V) fp32 tensor: at R = 256 canvas positions and V = 262,144 each pass is 268 MB.
Here one program owns one row and walks it in BLOCK-wide chunks, keeping only scalars between chunks:
- online softmax statistics (Milakov & Gimelshein 2018, arXiv 1805.02867) with the entropy carried alongside:
  m = running max, s = sum exp(z - m), t = sum exp(z - m) * (z - m), and at the end H = log(s) - t / s.
  (That is the usual H = log(s) + m - t'/s with t' = sum exp(z - m) * z, shifted by m: no cancellation of two
  ~|z| sized terms, so entropies near the 0.005 stopping threshold keep their digits.)
- the running argmax (strictly greater wins, so ties keep the lowest index, like `torch.argmax`);
- a running Gumbel-max (Gumbel 1954; Maddison et al. 2014) with noise hashed from (row seed, column) exactly
  as `reference.noise_bits` and `reference.gumbel_from_bits` do, so `reference.vocab_pass_reference` is its
  oracle.
Nothing of size V is written by that pass: no probabilities, no noise.

With `probs_out`, a second sweep writes the softmax the self-conditioning product needs (in place over the
logits if asked): the only full-vocabulary tensor of a step besides the head's output.

Triton is optional: without it this module imports and `vocab_pass` raises; the engine then samples with
`engine.denoising.sampler.vocab_pass_torch`.
"""

from __future__ import annotations

import os

import torch

from engine.denoising.rng import GOLDEN32, row_seeds

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs (macOS, minimal containers)
    triton = None

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_BLOCK = 4096


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1, Triton's own switch)."""
    if triton is None:
        return False
    knobs = getattr(triton, "knobs", None)  # Triton >= 3.4 parses its settings there
    return bool(knobs.runtime.interpret) if knobs is not None else os.environ.get("TRITON_INTERPRET") == "1"


if triton is not None:
    _GOLDEN32 = tl.constexpr(GOLDEN32)

    @triton.jit
    def _mix32(x):
        # reference.mix32 ("lowbias32") on uint32 lanes; multiplication wraps mod 2**32 natively here.
        x ^= x >> 16
        x *= tl.full((), 0x7FEB352D, tl.uint32)
        x ^= x >> 15
        x *= tl.full((), 0x846CA68B, tl.uint32)
        x ^= x >> 16
        return x

    @triton.jit
    def _tanh(y):
        # No portable tanh in tl.math. Odd Taylor polynomial (to a**9) below 0.25, where 1 - 2/(e**2a + 1)
        # would cancel; relative error < 1 ulp there and ~2 ulp above. fp32 tanh is exactly 1 from |y| ~ 9.01
        # on, so clamping at 10 changes nothing and keeps a * a and exp(2a) finite.
        a = tl.minimum(tl.abs(y), 10.0)
        a2 = a * a
        small = a + a * a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 + a2 * (-17.0 / 315.0 + a2 * (62.0 / 2835.0))))
        big = 1.0 - 2.0 / (tl.exp(2.0 * a) + 1.0)
        t = tl.where(a < 0.25, small, big)
        return tl.where(y < 0, -t, t)

    @triton.jit
    def _vocab_pass_kernel(
        logits_ptr,  # (R, V) fp32/bf16/fp16, unit stride along V
        inv_t_ptr,  # (R,) fp32
        seed_ptr,  # (R,) int64
        entropy_ptr,  # (R,) fp32 out
        argmax_ptr,  # (R,) int64 out
        sample_ptr,  # (R,) int64 out
        probs_ptr,  # (R, V) out when WRITE_PROBS (may be logits_ptr: each element is read before it is written)
        V,
        row_stride,
        probs_stride,
        softcap,
        HAS_SOFTCAP: tl.constexpr,
        WRITE_PROBS: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)  # int64: row * row_stride passes 2**31 at large batch x vocab
        row_ptr = logits_ptr + row * row_stride
        inv_t = tl.load(inv_t_ptr + row)
        seed = tl.load(seed_ptr + row)
        lo = (seed & 0xFFFFFFFF).to(tl.uint32)
        hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
        k1 = _mix32(lo ^ _mix32(hi))
        k2 = _mix32(hi ^ _mix32(lo + tl.full((), _GOLDEN32, tl.uint32)))

        neg_inf = float("-inf")
        m = tl.full((), neg_inf, tl.float32)  # running max of z; also the running argmax's value
        s = tl.zeros((), tl.float32)  # sum exp(z - m)
        t = tl.zeros((), tl.float32)  # sum exp(z - m) * (z - m)
        best = tl.zeros((), tl.int32)
        g_max = tl.full((), neg_inf, tl.float32)  # running max of z + Gumbel noise
        g_best = tl.zeros((), tl.int32)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)  # (BLOCK,)
            in_row = cols < V
            x = tl.load(row_ptr + cols, mask=in_row, other=neg_inf).to(tl.float32)
            if HAS_SOFTCAP:
                x = softcap * _tanh(x / softcap)
            z = tl.where(in_row, x * inv_t, neg_inf)  # padding lanes stay -inf after the soft-cap

            c_max, c_arg = tl.max(z, 0, return_indices=True, return_indices_tie_break_left=True)
            best = tl.where(c_max > m, start + c_arg, best)
            m_new = tl.maximum(m, c_max)
            # All -inf so far: shift by 0, keeping exp() away from -inf - -inf.
            shift = tl.where(m_new == neg_inf, 0.0, m_new)
            alpha = tl.exp(m - shift)
            # Move (s, t) from max m to max m_new: sum e^(z-m_new)(z-m_new) = alpha * (t + (m - m_new) * s).
            # The where()s keep -inf out of products with 0 (s = 0 while m = -inf; e = 0 on -inf lanes).
            t = alpha * (t + tl.where(s > 0, m - shift, 0.0) * s)
            s = alpha * s
            e = tl.exp(z - shift)
            s += tl.sum(e, 0)
            t += tl.sum(e * tl.where(e > 0, z - shift, 0.0), 0)
            m = m_new

            h = _mix32(_mix32(cols.to(tl.uint32) ^ k1) ^ k2)
            # reference.gumbel_from_bits, operation for operation (see there for why the tail is built so).
            v = (h.to(tl.float32) + 1.0) * 2.3283064365386963e-10  # 2**-32
            series = v * (1.0 + v * (0.5 + v * (1.0 / 3.0 + v * 0.25)))
            g = z - tl.log(tl.where(v < 0.0078125, series, -tl.log(1.0 - v)))
            cg_max, cg_arg = tl.max(g, 0, return_indices=True, return_indices_tie_break_left=True)
            g_best = tl.where(cg_max > g_max, start + cg_arg, g_best)
            g_max = tl.maximum(g_max, cg_max)

        tl.store(entropy_ptr + row, tl.log(s) - t / s)
        tl.store(argmax_ptr + row, best.to(tl.int64))
        tl.store(sample_ptr + row, g_best.to(tl.int64))
        if WRITE_PROBS:
            # Second sweep: softmax(z) = exp(z - m) / s, for the self-conditioning product (one (R, V) tensor).
            shift = tl.where(m == neg_inf, 0.0, m)
            inv_s = 1.0 / s
            out_ptr = probs_ptr + row * probs_stride
            for start in range(0, V, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                in_row = cols < V
                x = tl.load(row_ptr + cols, mask=in_row, other=neg_inf).to(tl.float32)
                if HAS_SOFTCAP:
                    x = softcap * _tanh(x / softcap)
                z = tl.where(in_row, x * inv_t, neg_inf)
                p = tl.exp(z - shift) * inv_s
                tl.store(out_ptr + cols, p.to(out_ptr.dtype.element_ty), mask=in_row)


def vocab_pass(
    logits: torch.Tensor,
    inv_temperature: float | torch.Tensor,
    softcap: float | None,
    seed: int | torch.Tensor,
    *,
    probs_out: torch.Tensor | None = None,
    block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R, V) logits -> entropy fp32 (R,), argmax int64 (R,), sample int64 (R,), in one pass over the logits.

    With `probs_out` (R, V), a second pass writes softmax of the processed logits there, in its dtype; it may be
    `logits` itself (the logits are then consumed: no second full-vocabulary tensor is built).

    Same contract as `reference.vocab_pass_reference`: `inv_temperature` a float or (R,) tensor, `softcap`
    None when the logits are already capped, `seed` an int or (R,) int64 tensor (see `engine.denoising.rng.row_seeds`).
    Logits must be finite or -inf; a row with no finite logit has undefined outputs. No host synchronisation.
    Under CUDA-graph capture pass `seed` and `inv_temperature` as device tensors updated in place: Python
    values are baked into the graph, and every replay would reuse the same noise.
    """
    if triton is None:
        raise RuntimeError("vocab_pass needs Triton (pip install triton); else use "
                           "engine.denoising.sampler.vocab_pass_torch")
    assert logits.dim() == 2, f"logits must be (R, V), got shape {tuple(logits.shape)}"
    assert logits.dtype in SUPPORTED_DTYPES, f"logits dtype must be fp32/bf16/fp16, got {logits.dtype}"
    assert logits.stride(1) == 1, "logits rows must be contiguous (stride 1 along V)"
    assert logits.is_cuda or interpreting(), f"logits must be on a CUDA device, got {logits.device}"
    rows, vocab = logits.shape
    assert 0 < vocab < 2**31, f"vocabulary size {vocab} out of range"
    assert softcap is None or softcap > 0, f"softcap must be None or > 0, got {softcap}"
    if isinstance(inv_temperature, torch.Tensor):
        assert inv_temperature.shape == (rows,), f"inv_temperature must be a float or ({rows},) tensor"
        inv_t = inv_temperature.to(device=logits.device, dtype=torch.float32).contiguous()
    else:
        assert 0 <= inv_temperature < float("inf"), "inv_temperature must be finite and >= 0"
        inv_t = torch.full((rows,), inv_temperature, device=logits.device, dtype=torch.float32)
    seeds = row_seeds(seed, rows, logits.device).contiguous()
    if block is None:
        block = min(MAX_BLOCK, triton.next_power_of_2(vocab))
    assert block >= 16 and block & (block - 1) == 0, f"block must be a power of two >= 16, got {block}"

    entropy = torch.empty(rows, device=logits.device, dtype=torch.float32)
    argmax = torch.empty(rows, device=logits.device, dtype=torch.int64)
    sample = torch.empty(rows, device=logits.device, dtype=torch.int64)
    if probs_out is not None:
        assert probs_out.shape == logits.shape and probs_out.stride(1) == 1, "probs_out must be (R, V), unit stride"
        assert probs_out.dtype in SUPPORTED_DTYPES and probs_out.device == logits.device, "probs_out dtype/device"
    if rows == 0:
        return entropy, argmax, sample
    _vocab_pass_kernel[(rows,)](
        logits, inv_t, seeds, entropy, argmax, sample, logits if probs_out is None else probs_out,
        vocab, logits.stride(0), 0 if probs_out is None else probs_out.stride(0),
        1.0 if softcap is None else float(softcap),
        HAS_SOFTCAP=softcap is not None, WRITE_PROBS=probs_out is not None, BLOCK=block,
        num_warps=8 if block >= 2048 else 4,
    )  # fmt: skip
    return entropy, argmax, sample
