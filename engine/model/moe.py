"""The mixture-of-experts block: router, (token, expert) pairs sorted by expert with group offsets computed on the
device, and one grouped GEMM per expert projection (`grouped_linear`), never a Python loop over experts.

`grouped_linear(x, w, offsets, max_rows)` is the one place expert weights are multiplied. A quantized weight plugs
in there: any object that is not a `torch.Tensor` and has `grouped_linear(x, offsets) -> Tensor` (`GroupedWeight`;
engine.quant.modules.QuantWeight is one) is called instead, and `MoE.set_experts` installs such objects in place of
the dense tensors (the loader's quantized path swaps them in by attribute name).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import TextConfig
from engine.model.ops import rms_norm


@runtime_checkable
class GroupedWeight(Protocol):
    """An expert weight stack (G, out, in) in another format (int4/int8/fp8 with scales, ...)."""

    shape: torch.Size  # (G, out, in), as the dense tensor it stands for

    def grouped_linear(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """x (S, in) rows sorted by group, offsets (G,) int32 cumulative row ends (on the device) -> (S, out)."""
        ...


def _grouped_mm_eager(x: torch.Tensor, wt: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return F.grouped_mm(x, wt, offs=offsets)


# torch's grouped GEMM, opaque to torch.compile: its meta function admits only bf16, while the CPU kernel runs every
# float dtype.
_grouped_mm = torch.library.custom_op("dg_engine::grouped_mm", _grouped_mm_eager, mutates_args=())


@_grouped_mm.register_fake
def _(x: torch.Tensor, wt: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], wt.shape[2])


def grouped_mm_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """torch's grouped GEMM runs every float dtype on CPU, and bf16 on CUDA devices of compute capability >= 8.0."""
    if not hasattr(F, "grouped_mm"):
        return False
    if device.type == "cpu":
        return True
    return device.type == "cuda" and dtype == torch.bfloat16 and torch.cuda.get_device_capability(device) >= (8, 0)


def _padded_linear(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, max_rows: int) -> torch.Tensor:
    """grouped_linear as one batched GEMM over groups padded to `max_rows` rows: more FLOPs (G * max_rows rows
    instead of S), no host sync, static shapes. For devices/dtypes without a grouped GEMM."""
    s, g = x.shape[0], w.shape[0]
    rows = torch.arange(s, device=x.device)
    group = torch.searchsorted(offsets, rows.to(offsets.dtype), right=True).clamp_max(g - 1)  # (S,)
    starts = offsets - torch.diff(offsets, prepend=offsets.new_zeros(1))  # (G,) first row of each group
    slot = rows - starts[group].long()
    padded = x.new_zeros(g, max_rows, x.shape[1])
    padded[group, slot] = x
    return torch.bmm(padded, w.transpose(1, 2))[group, slot]  # (S, out)


def grouped_linear(x: torch.Tensor, w: torch.Tensor | GroupedWeight, offsets: torch.Tensor, max_rows: int,
                   use_grouped_mm: bool | None = None) -> torch.Tensor:
    """x (S, in) sorted by group, w (G, out, in), offsets (G,) int32 cumulative row ends (on the device), at most
    `max_rows` rows per group -> (S, out)."""
    if not isinstance(w, torch.Tensor):
        return w.grouped_linear(x, offsets)
    x = x.to(w.dtype)
    if use_grouped_mm is None:
        use_grouped_mm = grouped_mm_supported(x.device, x.dtype)
    if use_grouped_mm:  # the custom op only where torch.compile traces: eager calls skip its dispatch overhead
        op = _grouped_mm if torch.compiler.is_compiling() else _grouped_mm_eager
        return op(x, w.transpose(-2, -1), offsets)
    return _padded_linear(x, w, offsets, max_rows)


class MoE(nn.Module):
    """Router + experts stored as 3D tensors. (token, expert) pairs are sorted by expert and run as one grouped
    GEMM per projection; the K expert outputs of a token are summed in top-k order."""

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.top_k, self.eps, self.num_experts = cfg.top_k_experts, cfg.rms_norm_eps, e
        self.approximate = cfg.gelu_approximate  # F.gelu's: "tanh" (gelu_pytorch_tanh) or "none" (exact, "gelu")
        self.router_proj = nn.Linear(h, e, bias=False)
        self.router_scale = nn.Parameter(torch.ones(h))
        self.per_expert_scale = nn.Parameter(torch.ones(e))
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))  # (E, 2I, H)
        self.down_proj = nn.Parameter(torch.empty(e, h, i))  # (E, H, I)
        self.use_grouped_mm: bool | None = None  # None: decided per call (see select_kernels)

    def select_kernels(self, device: torch.device, dtype: torch.dtype) -> None:
        """Fix the expert GEMM for the serving device once, outside any compiled region."""
        self.use_grouped_mm = grouped_mm_supported(device, dtype)

    def set_experts(self, gate_up: torch.Tensor | GroupedWeight, down: torch.Tensor | GroupedWeight) -> None:
        """Replace the expert stacks, e.g. by quantized `GroupedWeight`s of shapes (E, 2I, H) and (E, H, I)."""
        for name, new in (("gate_up_proj", gate_up), ("down_proj", down)):
            if tuple(new.shape) != tuple(getattr(self, name).shape):
                raise ValueError(f"{name}: shape {tuple(new.shape)} != {tuple(getattr(self, name).shape)}")
            delattr(self, name)
            setattr(self, name, new if not isinstance(new, torch.Tensor) or isinstance(new, nn.Parameter)
                    else nn.Parameter(new, requires_grad=False))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (N, H) residual stream -> weights (N, K) fp32, expert ids (N, K)."""
        h = rms_norm(x, None, self.eps) * self.router_scale * x.shape[-1] ** -0.5
        probs = F.softmax(self.router_proj(h), dim=-1, dtype=torch.float32)
        w, idx = torch.topk(probs, k=self.top_k, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        return w * self.per_expert_scale[idx], idx

    def forward(self, x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """x (N, H) normed input, w/idx (N, K) -> (N, H)."""
        n, h = x.shape
        ids, perm = torch.sort(idx.reshape(-1))  # (S,) with S = N*K
        # offsets[e] = pairs routed to experts <= e: searchsorted on the sorted ids keeps the shape static and the
        # counts on the device (bincount would size its output from the data, a host sync).
        experts = torch.arange(self.num_experts, device=ids.device, dtype=ids.dtype)
        offsets = torch.searchsorted(ids, experts, right=True).to(torch.int32)
        # top-k experts of a token are distinct: no expert gets more than N rows
        gate, up = grouped_linear(x.index_select(0, perm // self.top_k), self.gate_up_proj, offsets, n,
                                  self.use_grouped_mm).chunk(2, dim=-1)
        y = grouped_linear(F.gelu(gate, approximate=self.approximate) * up, self.down_proj, offsets, n,
                           self.use_grouped_mm)
        y = y * w.reshape(-1).index_select(0, perm).unsqueeze(-1)  # (S, H)
        # back to (token, k) order: row j of y belongs at perm[j]
        return torch.empty_like(y).index_copy_(0, perm, y).view(n, self.top_k, h).sum(dim=1).to(x.dtype)
