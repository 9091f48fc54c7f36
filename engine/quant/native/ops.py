"""Calls into the native dequantization library on torch tensors (CPU, contiguous rows). Each returns fp32 values
bit-equal to engine.formats.gguf_quants.dequantize of the same rows."""

from __future__ import annotations

import torch

from engine.quant.native import build


def available(qtype: str) -> bool:
    """Whether ggml type `qtype` can be dequantized natively here (the library built and knows the type)."""
    return qtype in build.QTYPES and build.load() is not None


def _check(raw: torch.Tensor) -> None:
    if raw.device.type != "cpu" or raw.dtype != torch.uint8 or raw.dim() != 2 or raw.stride(1) != 1:
        raise ValueError(f"native dequant needs CPU uint8 rows (R, row_bytes) with contiguous rows, got "
                         f"{raw.dtype} {tuple(raw.shape)} stride {raw.stride()} on {raw.device}")


def dequant_rows(qtype: str, raw: torch.Tensor, lo: int, hi: int, k: int, out: torch.Tensor,
                 threads: int | None = None) -> torch.Tensor:
    """Rows lo:hi of raw (R, row_bytes) uint8 -> out[:hi - lo] (fp32, rows of k values, contiguous rows)."""
    lib = build.load()
    _check(raw)
    n = hi - lo
    if lib is None or not (0 <= lo <= hi <= raw.shape[0]) or out.dtype != torch.float32 or out.stride(-1) != 1:
        raise ValueError(f"native dequant: bad call ({build.reason() or 'arguments'})")
    if out.shape[0] < n or out.shape[-1] != k:
        raise ValueError(f"native dequant: out {tuple(out.shape)} cannot hold {n} rows of {k}")
    nt = torch.get_num_threads() if threads is None else threads
    rc = lib.dg_dequant_rows(build.QTYPES[qtype], raw.data_ptr() + lo * raw.stride(0), raw.stride(0), n, k,
                             out.data_ptr(), out.stride(0), nt)
    if rc != 0:
        raise ValueError(f"native dequant: type {qtype} refused")
    return out[:n]


def gather(qtype: str, raw: torch.Tensor, ids: torch.Tensor, k: int) -> torch.Tensor:
    """Rows ids (any shape, int) of raw (R, row_bytes) -> (*ids.shape, k) fp32: a quantized table's lookup."""
    lib = build.load()
    _check(raw)
    flat = ids.reshape(-1).to(torch.int64).contiguous()
    if lib is None:
        raise ValueError(f"native dequant: not available ({build.reason()})")
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= raw.shape[0]):
        raise IndexError(f"index out of range for a table of {raw.shape[0]} rows")
    out = torch.empty(flat.numel(), k, dtype=torch.float32)
    lib.dg_dequant_gather(build.QTYPES[qtype], raw.data_ptr(), raw.stride(0), flat.data_ptr(), flat.numel(), k,
                          out.data_ptr(), out.stride(0))
    return out.view(*ids.shape, k)


INT8 = ("Q4_K", "Q5_K", "Q6_K")  # the types `qmatmul_int8` multiplies (where the library has it)


def int8_available(qtype: str) -> bool:
    """Whether `qmatmul_int8` runs for ggml type `qtype` here (the library built with AVX2 and FMA)."""
    lib = build.load()
    return qtype in INT8 and lib is not None and bool(lib.dg_int8_available())


def qmatmul(qtype: str, raw: torch.Tensor, lo: int, hi: int, k: int, x: torch.Tensor, y: torch.Tensor,
            threads: int | None = None) -> torch.Tensor:
    """x (M, k) fp32 @ rows lo:hi of raw, transposed -> y (M, hi - lo) fp32 (rows of y may be strided): each weight
    row dequantized once to its exact fp32 values, in cache, and multiplied with every row of x (for few rows of x)."""
    return _product("dg_qmatmul", qtype, raw, lo, hi, k, x, y, threads)


def qmatmul_int8(qtype: str, raw: torch.Tensor, lo: int, hi: int, k: int, x: torch.Tensor, y: torch.Tensor,
                 threads: int | None = None) -> torch.Tensor:
    """As `qmatmul`, in 8-bit integers as llama.cpp computes it (int8.c): x quantized per block to int8 codes, the
    weight's codes and integer sub-scales multiplied exactly. Types: INT8, where `int8_available`."""
    if not int8_available(qtype):
        raise ValueError(f"native qmatmul_int8: not for {qtype} here (types {', '.join(INT8)}, AVX2 + FMA)")
    return _product("dg_qmatmul_int8", qtype, raw, lo, hi, k, x, y, threads)


def _product(fn: str, qtype: str, raw: torch.Tensor, lo: int, hi: int, k: int, x: torch.Tensor, y: torch.Tensor,
             threads: int | None) -> torch.Tensor:
    lib = build.load()
    _check(raw)
    n, m = hi - lo, x.shape[0]
    if lib is None or not (0 <= lo <= hi <= raw.shape[0]) or k % 8:
        raise ValueError(f"native {fn}: bad call ({build.reason() or f'k={k} must be a multiple of 8'})")
    if x.dtype != torch.float32 or x.shape[-1] != k or x.stride(-1) != 1:
        raise ValueError(f"native {fn}: x must be fp32 (M, {k}) with contiguous rows, got {x.dtype} "
                         f"{tuple(x.shape)}")
    if y.dtype != torch.float32 or tuple(y.shape) != (m, n) or y.stride(-1) != 1:
        raise ValueError(f"native {fn}: y must be fp32 ({m}, {n}) with contiguous rows, got {tuple(y.shape)}")
    nt = torch.get_num_threads() if threads is None else threads
    rc = getattr(lib, fn)(build.QTYPES[qtype], raw.data_ptr() + lo * raw.stride(0), raw.stride(0), n, k,
                          x.data_ptr(), m, x.stride(0), y.data_ptr(), y.stride(0), nt)
    if rc == -3:
        raise MemoryError(f"native {fn}: no memory for its buffers ({m} x {k})")
    if rc != 0:
        raise ValueError(f"native {fn}: type {qtype} with k={k} refused ({rc})")
    return y
