"""The `weights` setting resolved for one checkpoint and device, and the per-tensor conversion the loader applies
while reading: each target weight is quantized as soon as it is read, so peak memory stays near the quantized size.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from engine.config import TextConfig
from engine.formats import gguf
from engine.model.transformer import map_name
from engine.quant import memory
from engine.quant.checkpoint import fp8_dynamic_scheme, quantization_config
from engine.quant.formats import INT4_GROUP, INT4_SYMMETRIC, QUANTIZED, QuantParts, dequantize, quantize
from engine.quant.modules import TABLE, is_target, module_path, swap_in
from engine.quant.native import ops as native_ops

WEIGHTS = ("auto", "bf16", "int8", "int4", "fp8")


@dataclass
class WeightPlan:
    """Target format `fmt` ("bf16" = not quantized: the compute dtype) on `device`; `convert` is the loader's hook.
    `as_stored`: the checkpoint is served in its own quantized format, so a tensor it stores unquantized (its
    `ignore` list, e.g. the published FP8 checkpoint's self-conditioning MLP, or any bf16 weight without a scale)
    stays unquantized, as the checkpoint's scheme computes it."""

    fmt: str
    device: torch.device
    dtype: torch.dtype
    as_stored: bool = False
    symmetric: bool = INT4_SYMMETRIC
    group_size: int = INT4_GROUP
    parts: dict[str, QuantParts] = field(default_factory=dict)

    def convert(self, key: str, value: torch.Tensor | QuantParts) -> dict[str, torch.Tensor]:
        """One checkpoint tensor (our state-dict key) -> the state-dict entries it becomes on the device."""
        quant = self.fmt in QUANTIZED and is_target(key)
        if self.as_stored and not isinstance(value, QuantParts):
            quant = False
        if isinstance(value, QuantParts):
            same = value.fmt == self.fmt or (self.fmt == "gguf" and value.fmt.startswith("gguf:"))
            if same and is_target(key):  # a checkpoint served in its own format: the stored bytes, unchanged
                return self._entries(key, value.to(self.device))
            if same and key == TABLE and packed_table(value, self.device):  # the tied table, read in place
                return self._entries(key, value)
            # dequantized on the device, in the compute dtype (one tensor at a time)
            value = dequantize(value.to(self.device), self.dtype)
        if not quant:
            # Quantized plans copy: safetensors hands out tensors backed by the file's mmap, and a kept alias would pin
            # the whole shard's touched pages (quantized tensors included) in resident memory for the model's
            # lifetime. Unquantized plans keep the tensor as loaded, as transformers does: with a copy, some CPU
            # matmuls differ from the reference's in their last bits (most likely the copy's memory alignment picks
            # another kernel), which flipped sampled tokens in tests/engine/test_parity.py.
            copy = self.fmt in QUANTIZED
            return {key: value.to(device=self.device, dtype=self.dtype, copy=copy)}
        parts = quantize(value, self.fmt, self.device, symmetric=self.symmetric, group_size=self.group_size)
        del value
        trim_heap()
        return self._entries(key, parts)

    def _entries(self, key: str, parts: QuantParts) -> dict[str, torch.Tensor]:
        self.parts[key] = parts
        path = module_path(key)
        out = {f"{path}.qweight": parts.qweight, f"{path}.scale": parts.scale}
        if parts.zero is not None:
            out[f"{path}.zero"] = parts.zero
        return out

    def share_encoder(self, expected: Iterable[str], tied: bool) -> dict[str, dict[str, torch.Tensor]]:
        """Quantized weights of a separate encoder (`enc_layers.*`) that are the decoder's take the decoder's parts
        (the same tensors, no second copy): every target under a tied config (the loader skips those tensors), and
        one the checkpoint stores equal to the decoder's. Returns encoder key -> its state-dict entries."""
        shared = {}
        for key in expected:
            dec = key.removeprefix("enc_")
            if key == dec or dec not in self.parts:
                continue
            own = self.parts.get(key)
            if (own is None and tied) or (own is not None and _same(own, self.parts[dec])):
                shared[key] = self._entries(key, self.parts[dec])
        return shared

    def finish(self, model: nn.Module) -> None:
        """Swap the quantized modules into the (meta) model before its state dict is assigned."""
        swap_in(model, self.parts, self.dtype)


def packed_table(parts: QuantParts, device: torch.device) -> bool:
    """Whether a GGUF's embedding table stays packed (`engine.quant.modules.QuantTable`): a quantized ggml type, on a
    CPU, where the native kernels read it (its head and soft embedding then cost about what the dense table's do,
    at a fraction of the memory: the dense table is ~4x a Q8_0 one, ~6x a Q6_K one)."""
    qtype = parts.fmt.removeprefix("gguf:")
    return (device.type == "cpu" and parts.fmt.startswith("gguf:") and qtype not in ("F32", "F16", "BF16")
            and native_ops.available(qtype))


def _same(a: QuantParts, b: QuantParts) -> bool:
    """Whether two quantized weights hold the same bits (quantization is deterministic: equal inputs, equal parts)."""
    if a.fmt != b.fmt or a.shape != b.shape or (a.zero is None) != (b.zero is None):
        return False
    pairs = [(a.qweight, b.qweight), (a.scale, b.scale)] + ([(a.zero, b.zero)] if a.zero is not None else [])
    return all(x.view(torch.uint8).equal(y.view(torch.uint8)) if x.dtype == torch.float8_e4m3fn else x.equal(y)
               for x, y in pairs)


def trim_heap() -> None:
    """Hand the freed temporaries of one tensor's quantization back to the OS (glibc's malloc_trim).

    glibc serves allocations of a few MB from its heap once large blocks have been freed (its mmap threshold adapts
    upwards), and the long-lived quantized buffers interleaved with the freed temporaries keep that heap from
    shrinking: without this, loading a bf16 checkpoint as int4 peaked at several times the int4 size in resident
    memory."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def one_heap_arena() -> None:
    """Serve every thread's allocations from glibc's one main heap (mallopt M_ARENA_MAX = 1; a no-op elsewhere). On
    a CPU the matmuls' worker threads (OpenMP) otherwise each get an arena of their own, which keeps its freed blocks:
    serving the 316M Q4_K_M bench file with 2 threads, anonymous memory after a canvas-256 fill was 54 MB, 36 MB with
    one arena. Call before the worker threads first allocate (the loader does, on a CPU)."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(-8, 1)  # M_ARENA_MAX


def own_format(path: Path) -> str | None:
    """The checkpoint's own quantized format: "fp8" for a compressed-tensors FP8 checkpoint, "gguf" for a GGUF file
    (its blocks, whatever their types), else None."""
    if gguf.is_gguf(path):
        return "gguf"
    raw = quantization_config(path)
    if raw is None:
        return None
    fp8_dynamic_scheme(raw)  # raises on a scheme we cannot serve
    return "fp8"


def gguf_weight_bytes(path: str | Path, compute_bytes: int, device: torch.device | str = "cuda") -> int:
    """Bytes of a GGUF checkpoint's weights served packed (weights=auto, see `WeightPlan.convert`): quantized targets
    as stored (on a CPU with the native kernels, the embedding table too), every other tensor in the compute
    dtype."""
    cpu_table = torch.device(device).type == "cpu" and native_ops.available("Q8_0")
    total = 0
    for name, t in gguf.open_gguf(path).tensors.items():
        if name in gguf.IGNORED:
            continue
        hf = gguf.hf_name(name)
        key = map_name(hf) if hf else None
        packed = t.qtype not in ("F32", "F16", "BF16") and key is not None and (
            is_target(key) or (key == TABLE and cpu_table))
        total += t.nbytes if packed else math.prod(t.shape) * compute_bytes
    return total


def gguf_fit_message(path: Path, cfg: TextConfig, fit: memory.Fit, compute_bytes: int, context_tokens: int) -> str:
    """Why a GGUF file does not fit, and what would: weights=int4 (the file dequantized, then quantized to int4 as
    a bf16 checkpoint would be) when that fits, else a smaller quant of the file or a larger device."""
    kind = ""
    try:
        import gguf as gguf_py

        ftype = gguf.open_gguf(path).fields.get("general.file_type")
        kind = f" ({gguf_py.LlamaFileType(int(ftype)).name.removeprefix('MOSTLY_')})" if ftype is not None else ""
    except Exception:  # noqa: BLE001 -- the name is a courtesy; the figures below are what matter
        kind = ""
    head = (f"{Path(path).name}{kind} needs {fit.weights / memory.GB:.1f} GB of packed weights "
            f"(+{fit.reserve / memory.GB:.1f} GB for {memory.kv_words(context_tokens)} and the fill), the device has "
            f"{fit.free / memory.GB:.1f} GB free")
    int4 = memory.weight_bytes(cfg, "int4", compute_bytes)
    if int4 + fit.reserve <= fit.free:
        return f"{head}: try weights=int4 ({int4 / memory.GB:.1f} GB, quantized from the file at load)"
    return f"{head}: use a smaller quant of the file (fewer bits per weight) or a larger device"


def resolve(weights: str, path: Path, cfg: TextConfig, device: torch.device, dtype: torch.dtype,
            free: int | None = None, context_tokens: int = memory.DEFAULT_CONTEXT_TOKENS) -> WeightPlan:
    """The plan for `weights` (auto | bf16 | int8 | int4 | fp8), after the fit check (raises memory.FitError with
    the format that would fit). `free` defaults to the device's free memory now."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}; got {weights!r}")
    own = own_format(path)
    free = memory.free_bytes(device) if free is None else free
    if own == "gguf":
        if weights == "auto":  # the blocks stay packed, dequantized per matmul
            overhead = memory.overhead_bytes(device)
            fit = memory.Fit("gguf", gguf_weight_bytes(path, dtype.itemsize, device),
                             memory.reserve_bytes(cfg, dtype.itemsize, context_tokens, overhead=overhead), free)
            if not fit.fits:
                raise memory.FitError(gguf_fit_message(path, cfg, fit, dtype.itemsize, context_tokens))
            return WeightPlan("gguf", device, dtype, as_stored=True)
        own = None  # an explicit format: every tensor dequantized, then made as from a bf16 checkpoint
    fit = memory.choose(cfg, weights, free, dtype.itemsize, own, context_tokens, memory.overhead_bytes(device))
    return WeightPlan(fit.fmt, device, dtype, as_stored=own is not None and fit.fmt == own)
