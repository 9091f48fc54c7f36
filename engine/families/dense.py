"""The full-attention dense transformer the mask-diffusion families share (Qwen2 for Dream and Open-dCoder, Llama
for LLaDA): pre-norm blocks, rotary attention with optional QKV bias and grouped KV heads, a SwiGLU MLP, tied or
untied head, no causal mask, logits optionally shifted right by one. Each family's folder reads its config into a
`DenseConfig` and names its tensors; the forward here is the same arithmetic as transformers' `Qwen2Model` /
`LlamaModel` run with an all-zero additive mask (tests/engine/test_family_dream.py, test_family_llada.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import ConfigError
from engine.model.ops import apply_rope


@dataclass(frozen=True)
class DenseConfig:
    """One mask-diffusion checkpoint's network shape and special ids (read by its family's config module)."""

    family: str  # the registry name ("dream", "llada")
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    qkv_bias: bool  # Qwen2: q/k/v projections carry a bias (o_proj never does)
    tie_word_embeddings: bool
    shift_logits: bool  # Dream/Open-dCoder: position i is predicted by logits[i - 1]
    mask_token_id: int
    pad_token_id: int
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    max_position_embeddings: int

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{self.family}: {name} must be > 0, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"{self.family}: {self.num_attention_heads} attention heads are not a multiple of "
                              f"{self.num_key_value_heads} KV heads")
        if self.head_dim % 2:
            raise ConfigError(f"{self.family}: head_dim must be even for rotary embeddings, got {self.head_dim}")
        for name, tid in (("mask", self.mask_token_id), ("pad", self.pad_token_id)):
            if not 0 <= tid < self.vocab_size:
                raise ConfigError(f"{self.family}: {name} token id {tid} is outside the vocabulary "
                                  f"({self.vocab_size})")
        if not self.eos_token_ids:
            raise ConfigError(f"{self.family}: no eos token id")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen2/Llama RMSNorm: normalised in fp32, cast back, then scaled (weight * x, no 1 + w offset)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class Block(nn.Module):
    def __init__(self, cfg: DenseConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.cfg = cfg
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.input_layernorm = nn.Parameter(torch.ones(h))
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kv: tuple[torch.Tensor, torch.Tensor, int] | None = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                                   torch.Tensor]:
        """x (B, T, H), cos/sin (T, 1, D) -> (B, T, H) and this block's k, v (B, Hkv, T, D); every position attends
        to every position. With `kv` (keys, values (B, Hkv, L, D) of a whole window, start): x holds rows
        start .. start + T of that window, whose fresh k/v replace the window's there (the dual cache)."""
        b, t, _ = x.shape
        d, eps = self.cfg.head_dim, self.cfg.rms_norm_eps
        h = rms_norm(x, self.input_layernorm, eps)
        q = apply_rope(self.q_proj(h).view(b, t, -1, d), cos, sin).transpose(1, 2)  # (B, Hq, T, D)
        k = apply_rope(self.k_proj(h).view(b, t, -1, d), cos, sin).transpose(1, 2)  # (B, Hkv, T, D)
        v = self.v_proj(h).view(b, t, -1, d).transpose(1, 2)
        keys, values = k, v
        if kv is not None:
            ck, cv, a = kv
            keys = torch.cat([ck[:, :, :a], k, ck[:, :, a + t:]], dim=2)
            values = torch.cat([cv[:, :, :a], v, cv[:, :, a + t:]], dim=2)
        att = F.scaled_dot_product_attention(q, keys, values, enable_gqa=k.shape[1] != q.shape[1])  # bidirectional
        x = x + self.o_proj(att.transpose(1, 2).reshape(b, t, -1))
        h = rms_norm(x, self.post_attention_layernorm, eps)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)), k, v


class DenseLM(nn.Module):
    """ids (B, T) -> logits (B, T, V) over the whole window (prefix, canvas and suffix attend to one another)."""

    def __init__(self, cfg: DenseConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = None if cfg.tie_word_embeddings else nn.Parameter(torch.empty(cfg.vocab_size,
                                                                                     cfg.hidden_size))

    def rope(self, t: int, device: torch.device, dtype: torch.dtype, start: int = 0) -> tuple[torch.Tensor,
                                                                                              torch.Tensor]:
        """cos, sin (T, 1, D) for positions start..start+T-1, in fp32 as transformers computes them."""
        d = self.cfg.head_dim
        inv = 1.0 / (self.cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d))
        f = torch.arange(start, start + t, device=device).float()[:, None] * inv[None, :]
        emb = torch.cat([f, f], dim=-1)
        return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]

    def hidden(self, ids: torch.Tensor, kv: WindowKV | None = None, start: int = 0) -> torch.Tensor:
        """(B, T) -> final-normed hidden states (B, T, H). `kv` empty: filled with every layer's window K/V;
        holding a window's: `ids` are its rows start .. start + T, attending to it (the dual cache)."""
        x = F.embedding(ids, self.embed_tokens)
        cos, sin = self.rope(ids.shape[1], ids.device, x.dtype, start)
        reuse = kv is not None and bool(kv.keys)
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, cos, sin, (kv.keys[i], kv.values[i], start) if reuse else None)
            if kv is not None and not reuse:
                kv.keys.append(k)
                kv.values.append(v)
        return rms_norm(x, self.norm, self.cfg.rms_norm_eps)

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.embed_tokens if self.lm_head is None else self.lm_head)

    def forward(self, ids: torch.Tensor, kv: WindowKV | None = None) -> torch.Tensor:
        """(B, T) -> (B, T, V) logits, shifted right by one where the family predicts position i at i - 1
        (position 0 keeps its own), so logits[:, i] is always the prediction for position i. An empty `kv` is
        filled with the window's K/V (for `rows`)."""
        logits = self._head(self.hidden(ids, kv))
        if self.cfg.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits

    def rows(self, ids: torch.Tensor, a: int, b: int, kv: WindowKV) -> torch.Tensor:
        """(B, b - a, V): the predictions for window positions a .. b, recomputing only the rows they read (a - 1 ..
        b - 1 when shifted) against `kv`, the window's K/V from an earlier full pass (Fast-dLLM's dual cache:
        approximate, since the other rows' K/V are not refreshed)."""
        s = 1 if self.cfg.shift_logits else 0
        lo, hi = max(a - s, 0), max(b - s, 1)
        logits = self._head(self.hidden(ids[:, lo:hi], kv, lo))  # rows lo .. hi
        if s:
            logits = torch.cat([logits[:, :1], logits], dim=1) if a == 0 else logits
        return logits[:, :b - a]


@dataclass
class WindowKV:
    """Every layer's keys and values (B, Hkv, L, D) over a whole window, from one full pass."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
