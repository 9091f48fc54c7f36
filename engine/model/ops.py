"""Numerical building blocks of the DiffusionGemma transformer: Gemma 4 RMSNorm and rotary embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.config import RopeSpec


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Gemma 4 RMSNorm in fp32 (no 1+w offset), cast back to the input dtype: x * (mean(x**2) + eps)**-0.5 * w.
    torch's fused kernel gives the bits of transformers' unfused formula on CPU (tests/engine/test_parity.py) in
    one op instead of six. In fp32 the casts are skipped (each is a dispatch, ~10 per layer)."""
    if x.dtype == torch.float32 and (weight is None or weight.dtype == torch.float32):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return F.rms_norm(x.float(), (x.shape[-1],), None if weight is None else weight.float(), eps).type_as(x)


def inv_freq(rope: RopeSpec, head_dim: int) -> torch.Tensor:
    """(head_dim/2,) inverse frequencies; "proportional" zero-pads the non-rotated share (those dims stay fixed)."""
    if rope.rope_type == "proportional":
        angles = int(rope.partial_rotary_factor * head_dim // 2)
        rotated = 1.0 / (rope.theta ** (torch.arange(0, 2 * angles, 2, dtype=torch.int64).float() / head_dim))
        freq = torch.cat([rotated, torch.zeros(head_dim // 2 - angles)])
        return freq / rope.factor
    dim = int(head_dim * rope.partial_rotary_factor)
    return 1.0 / (rope.theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


def rope_cos_sin(freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions (T,) -> cos, sin (T, 1, D) for x of shape (B, T, H, D)."""
    f = positions[:, None].float() * freq[None, :].to(positions.device)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
