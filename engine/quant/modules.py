"""Modules that hold quantized weights and dispatch their matmuls: `QuantLinear` replaces an nn.Linear,
`QuantWeight` replaces a 3D expert tensor (the MoE's `grouped_linear` hands it the sorted rows). Which of a model's
weights get quantized, and the swap on a (meta) model, live here too.

Matmul paths: with a `kernel` installed (engine.kernels.table.install: on CUDA with Triton, once the launcher passed
its self-check at load), the grouped kernel `engine.kernels.moe_quant` (ggml blocks read from a GGUF:
`engine.kernels.gguf_moe`) dequantizes tiles on the fly (a plain linear is one expert); on a CPU,
`engine.quant.cpu_matmul` repacks the weight once and multiplies cache-sized fp32 tiles, only the routed experts
(exact: the same fp32 values); elsewhere the weight (a whole expert stack) is dequantized to the activation dtype
and run with torch's dense (grouped) GEMM: correct, slower, a transient full-size copy of one weight at a time.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from engine.formats.gguf_quants import dequantize as dequantize_ggml
from engine.model.moe import grouped_linear
from engine.quant import cpu_matmul
from engine.quant.formats import QuantParts, dequantize, fake_quant_fp8_per_token
from engine.quant.native import ops as native_ops

# Our state-dict keys that are quantized (everything else stays in the compute dtype: embeddings / LM head, norms,
# router, per-expert scales, layer scalars). `enc_layers.*`: the layers of a separate encoder (untied checkpoints).
LINEAR_TARGETS = re.compile(
    r"^((enc_)?layers\.\d+\.self_attn\.[qkvo]_proj|(enc_)?layers\.\d+\.mlp\.(gate|up|down)_proj"
    r"|self_conditioning\.mlp\.(gate|up|down)_proj)\.weight$")
EXPERT_TARGETS = re.compile(r"^(enc_)?layers\.\d+\.moe\.(gate_up_proj|down_proj)$")
# The tied embedding: kept packed only where a plan says so (a GGUF's quantized table on a CPU: `QuantTable`)
TABLE = "embed_tokens"


def is_target(key: str) -> bool:
    """Whether our state-dict key names a weight that a quantized format stores quantized."""
    return bool(LINEAR_TARGETS.match(key) or EXPERT_TARGETS.match(key))


def module_path(key: str) -> str:
    """State-dict key of a target -> the dotted path of the module that replaces it."""
    return key[: -len(".weight")] if LINEAR_TARGETS.match(key) else key


class QuantWeight(nn.Module):
    """A quantized weight (..., N, K) as buffers `qweight`, `scale` and (asymmetric int4) `zero`."""

    def __init__(self, parts: QuantParts) -> None:
        super().__init__()
        self.fmt, self.shape, self.group_size = parts.fmt, tuple(parts.shape), parts.group_size
        self.act_dynamic = parts.act_dynamic
        # (x, parts, offsets) -> (S, N): the Triton launcher for this format, or None (the eager path)
        self.kernel: Callable[[torch.Tensor, QuantParts, torch.Tensor], torch.Tensor] | None = None
        self.register_buffer("qweight", parts.qweight)
        self.register_buffer("scale", parts.scale)
        self.register_buffer("zero", parts.zero)
        self._cpu: cpu_matmul.CpuWeight | None = None  # the CPU tile layout, packed at the first CPU call

    def cpu_weight(self) -> cpu_matmul.CpuWeight:
        """The weight in `engine.quant.cpu_matmul`'s tile layout (packed once, from the buffers as loaded)."""
        if self._cpu is None or self._cpu.shape != self.shape:
            self._cpu = cpu_matmul.pack(self.parts)
        return self._cpu

    @property
    def parts(self) -> QuantParts:
        return QuantParts(self.fmt, self.shape, self.qweight, self.scale, self.zero, self.group_size, self.act_dynamic)

    @property
    def nbytes(self) -> int:
        return self.parts.nbytes

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize(self.parts, dtype)

    def _act(self, x: torch.Tensor) -> torch.Tensor:
        return fake_quant_fp8_per_token(x) if self.act_dynamic else x

    def grouped_linear(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """x (S, K) rows sorted by expert, offsets (E,) int32 cumulative row ends (on the device) -> (S, N) in x's
        dtype."""
        x = self._act(x)
        if self.kernel is not None:
            return self.kernel(x, self.parts, offsets)
        if x.device.type == "cpu" and cpu_matmul.ENABLED:
            return cpu_matmul.grouped_linear(x, self.cpu_weight(), offsets)
        # Elsewhere: the whole stack (E, N, K) dequantized to x's dtype, then the dense grouped GEMM (torch's
        # grouped_mm; where there is none, a bmm padded to S rows per expert): no loop over experts, and the
        # offsets never leave the device.
        return grouped_linear(x, self.dequantize(x.dtype), offsets, x.shape[0])

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., K) -> (..., N) for a 2D weight."""
        x = self._act(x)
        if self.kernel is not None:
            flat = x.reshape(-1, x.shape[-1])
            offsets = torch.full((1,), flat.shape[0], dtype=torch.int32, device=x.device)
            parts = self.parts
            one = QuantParts(parts.fmt, (1, *parts.shape), parts.qweight[None], parts.scale[None],
                             parts.zero[None] if parts.zero is not None else None, parts.group_size)
            return self.kernel(flat.contiguous(), one, offsets).view(*x.shape[:-1], -1)
        if x.device.type == "cpu" and cpu_matmul.ENABLED:
            return cpu_matmul.linear(x, self.cpu_weight())
        return F.linear(x, self.dequantize(x.dtype))


class QuantLinear(QuantWeight):
    """Drop-in for nn.Linear(K, N) with a quantized weight; the bias (if any) stays in the compute dtype."""

    def __init__(self, parts: QuantParts, bias: torch.Tensor | None = None) -> None:
        super().__init__(parts)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return y + self.bias if self.bias is not None else y


class QuantTable(QuantWeight):
    """A tied embedding table (V, H) kept packed on a CPU (a GGUF's quantized `token_embd`): the lookup dequantizes
    only the looked-up rows, the LM head (x @ W.T) and self-conditioning's soft embedding (probs @ W) run tile by
    tile through `engine.quant.cpu_matmul`. Reads like the dense table where the model asks for its dtype, device
    or shape."""

    def __init__(self, parts: QuantParts, dtype: torch.dtype = torch.float32) -> None:
        super().__init__(parts)
        self.compute_dtype = dtype

    @property
    def dtype(self) -> torch.dtype:
        return self.compute_dtype

    @property
    def device(self) -> torch.device:
        return self.qweight.device

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (...) -> (..., H): the rows, dequantized (the same values as the whole table's)."""
        w = self.cpu_weight()
        if w.ggml:
            rows = native_ops.gather(w.ggml, w.q, ids, w.k)
        else:  # the torch dequantizer on the looked-up stored rows
            raw = self.qweight.reshape(self.shape[0], -1)
            rows = dequantize_ggml(raw[ids.reshape(-1)], self.fmt.removeprefix("gguf:"), w.k).view(*ids.shape, w.k)
        return rows.to(self.compute_dtype)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., H) -> (..., V): the tied LM head."""
        return self.linear(x)

    def mix(self, probs: torch.Tensor) -> torch.Tensor:
        """probs (..., V) -> (..., H): the probability-weighted sum of the rows."""
        return cpu_matmul.mix(probs, self.cpu_weight()).to(self.compute_dtype)


def empty_parts(shape: tuple[int, ...], fmt: str, device: torch.device | str, *, symmetric: bool,
                group_size: int, act_dynamic: bool = False) -> QuantParts:
    """Uninitialised QuantParts of a format (on the meta device: placeholders the loader assigns into)."""
    *lead, n, k = shape
    groups = -(-k // group_size)
    if fmt == "int4":
        q = torch.empty(*lead, n, -(-k // 2), dtype=torch.uint8, device=device)
        scale = torch.empty(*lead, n, groups, dtype=torch.bfloat16, device=device)
        zero = None if symmetric else torch.empty(*lead, n, groups, dtype=torch.uint8, device=device)
    else:
        dt = torch.int8 if fmt == "int8" else torch.float8_e4m3fn
        q = torch.empty(*lead, n, k, dtype=dt, device=device)
        scale, zero = torch.empty(*lead, n, 1, dtype=torch.float32, device=device), None
    return QuantParts(fmt, tuple(shape), q, scale, zero, group_size, act_dynamic)


def swap_in(model: nn.Module, formats: dict[str, QuantParts], dtype: torch.dtype = torch.float32) -> None:
    """Replace each target named in `formats` (our state-dict key -> parts, or placeholder parts on meta) by its
    quantized module: nn.Linear -> QuantLinear, an expert nn.Parameter -> QuantWeight."""
    for key, parts in formats.items():
        path = module_path(key)
        parent_name, _, attr = path.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, attr)
        if key == TABLE:
            new: nn.Module = QuantTable(parts, dtype)
        elif isinstance(old, nn.Linear):
            new = QuantLinear(parts, old.bias)
        else:
            new = QuantWeight(parts)
        delattr(parent, attr)
        setattr(parent, attr, new)


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer of a loaded model (quantized parts included)."""
    seen = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.nbytes for t in seen.values())
