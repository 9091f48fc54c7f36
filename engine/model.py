"""The DiffusionGemma text transformer: a causal encoder that writes the KV cache, a bidirectional decoder that
reads it. Both share every weight (unless the checkpoint gives the encoder its own: `enc_layers`); the per-layer
`layer_scalar` buffers and self-conditioning differ."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import LayerSpec, RopeSpec, TextConfig


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Gemma 4 RMSNorm in fp32 (no 1+w offset), cast back to the input dtype."""
    h = x.float()
    h = h * torch.pow(h.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    if weight is not None:
        h = h * weight.float()
    return h.type_as(x)


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


@dataclass
class KVCache:
    """Encoder keys/values per layer, (B, Hkv, L, D), for every context token (sliding layers are windowed at
    read time, so a cache can be truncated to any common prefix and extended exactly)."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def truncated(self, n: int) -> KVCache:
        return KVCache([k[:, :, :n] for k in self.keys], [v[:, :, :n] for v in self.values])


class Attention(nn.Module):
    def __init__(self, cfg: TextConfig, spec: LayerSpec) -> None:
        super().__init__()
        h, nh = cfg.hidden_size, cfg.num_attention_heads
        self.spec, self.eps = spec, cfg.rms_norm_eps
        self.q_proj = nn.Linear(h, nh * spec.head_dim, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(h, spec.num_kv_heads * spec.head_dim, bias=cfg.attention_bias)
        # Full-attention layers have no v_proj: values are the un-normed keys (K = V), then a scale-free norm.
        self.v_proj = nn.Linear(h, spec.num_kv_heads * spec.head_dim, bias=cfg.attention_bias) if spec.sliding else None
        self.o_proj = nn.Linear(nh * spec.head_dim, h, bias=cfg.attention_bias)
        self.q_norm = nn.Parameter(torch.ones(spec.head_dim))
        self.k_norm = nn.Parameter(torch.ones(spec.head_dim))

    def project_kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, H) -> k, v (B, Hkv, T, D)."""
        b, t, _ = x.shape
        raw_k = self.k_proj(x).view(b, t, -1, self.spec.head_dim)
        raw_v = self.v_proj(x).view(b, t, -1, self.spec.head_dim) if self.v_proj is not None else raw_k
        k = apply_rope(rms_norm(raw_k, self.k_norm, self.eps), cos, sin)
        v = rms_norm(raw_v, None, self.eps)
        return k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x, cos, sin, keys, values, mask) -> torch.Tensor:
        """x (B, T, H); keys/values (B, Hkv, S, D) already include this block's own K/V; mask (T, S) bool or None."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.spec.head_dim)
        q = apply_rope(rms_norm(q, self.q_norm, self.eps), cos, sin).transpose(1, 2)
        # Scaling is 1: q_norm/k_norm already fix the logit scale.
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=1.0,
                                             enable_gqa=keys.shape[1] != q.shape[1])
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int, approximate: str = "tanh") -> None:
        super().__init__()
        self.approximate = approximate  # F.gelu's: "tanh" (gelu_pytorch_tanh) or "none" (exact, "gelu")
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate=self.approximate) * self.up_proj(x))


def _grouped_mm_ok(x: torch.Tensor, wt: torch.Tensor) -> bool:
    """torch's grouped GEMM needs 16-byte-aligned strides (and on CUDA an sm80+ device)."""
    if not hasattr(F, "grouped_mm"):
        return False
    if x.device.type == "cuda" and torch.cuda.get_device_capability(x.device) < (8, 0):
        return False
    size = x.element_size()
    return (x.shape[1] * size) % 16 == 0 and (wt.shape[2] * size) % 16 == 0 and x.data_ptr() % 16 == 0


def grouped_linear(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """x (S, in) sorted by expert, w (E, out, in), offsets (E,) cumulative row ends -> (S, out).

    `w` may be a quantized expert weight (engine.quant.modules.QuantWeight): it runs its own grouped matmul."""
    if isinstance(w, nn.Module):
        return w.grouped_linear(x, offsets)
    wt = w.transpose(-2, -1)
    x = x.to(w.dtype)
    if _grouped_mm_ok(x, wt):
        return F.grouped_mm(x, wt, offs=offsets)
    out = x.new_zeros(x.shape[0], w.shape[1])
    start = 0
    for e, end in enumerate(offsets.tolist()):  # one host sync per call
        if end > start:
            torch.mm(x[start:end], wt[e], out=out[start:end])
        start = end
    return out


class MoE(nn.Module):
    """Router + experts stored as 3D tensors. (token, expert) pairs are sorted by expert and run as one grouped
    GEMM per projection; the K expert outputs of a token are summed in top-k order."""

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.top_k, self.eps, self.num_experts = cfg.top_k_experts, cfg.rms_norm_eps, e
        self.approximate = cfg.gelu_approximate
        self.router_proj = nn.Linear(h, e, bias=False)
        self.router_scale = nn.Parameter(torch.ones(h))
        self.per_expert_scale = nn.Parameter(torch.ones(e))
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))  # (E, 2I, H)
        self.down_proj = nn.Parameter(torch.empty(e, h, i))  # (E, H, I)

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
        counts = torch.bincount(ids, minlength=self.num_experts)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        gate, up = grouped_linear(x[perm // self.top_k], self.gate_up_proj, offsets).chunk(2, dim=-1)
        y = grouped_linear(F.gelu(gate, approximate=self.approximate) * up, self.down_proj, offsets)  # (S, H)
        y = y * w.reshape(-1)[perm].unsqueeze(-1)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.numel(), device=perm.device)
        return y[inv].view(n, self.top_k, h).sum(dim=1).to(x.dtype)


class Layer(nn.Module):
    def __init__(self, cfg: TextConfig, spec: LayerSpec) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        self.self_attn = Attention(cfg, spec)
        self.mlp = MLP(h, cfg.intermediate_size, cfg.gelu_approximate)
        self.moe = MoE(cfg)
        names = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2",
                 "pre_feedforward_layernorm_2")
        for name in names:
            setattr(self, name, nn.Parameter(torch.ones(h)))
        # The encoder and decoder layers carry separate (untied) scalars in the checkpoint.
        self.register_buffer("enc_layer_scalar", torch.ones(1))
        self.register_buffer("dec_layer_scalar", torch.ones(1))

    def forward(self, x, h, cos, sin, keys, values, mask, decoder: bool) -> torch.Tensor:
        """x (B, T, H) residual stream; h = input_layernorm(x), already computed by the caller for this block's K/V."""
        n = lambda t, w: rms_norm(t, w, self.eps)  # noqa: E731
        residual = x
        x = residual + n(self.self_attn(h, cos, sin, keys, values, mask), self.post_attention_layernorm)
        residual = x
        dense = n(self.mlp(n(x, self.pre_feedforward_layernorm)), self.post_feedforward_layernorm_1)
        flat = residual.reshape(-1, residual.shape[-1])
        w, idx = self.moe.route(flat)
        sparse = self.moe(n(flat, self.pre_feedforward_layernorm_2), w, idx).reshape(residual.shape)
        x = residual + n(dense + n(sparse, self.post_feedforward_layernorm_2), self.post_feedforward_layernorm)
        return x * (self.dec_layer_scalar if decoder else self.enc_layer_scalar)


class SelfConditioning(nn.Module):
    """Previous step's soft embedding -> gated MLP between a scaled pre-norm and a scale-free post-norm."""

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.pre_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size, cfg.gelu_approximate)

    def forward(self, embeds: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        return rms_norm(embeds + self.mlp(rms_norm(soft, self.pre_norm, self.eps)), None, self.eps)


class DiffusionGemmaText(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(Layer(cfg, spec) for spec in cfg.layers)
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.self_conditioning = SelfConditioning(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size))
        # An encoder with tensors of its own (untied config, or attention biases, which transformers never ties).
        # The loader shares every tensor that equals the decoder's, so only the differing ones take memory.
        self.enc_layers = nn.ModuleList(Layer(cfg, spec) for spec in cfg.layers) if cfg.separate_encoder else None
        self.enc_embed_tokens = None if cfg.tie_word_embeddings else nn.Parameter(torch.empty_like(self.embed_tokens))
        self.embed_scale = math.sqrt(cfg.hidden_size)
        self._freqs = {t: {} for t in ("sliding_attention", "full_attention")}

    # -- helpers -------------------------------------------------------------------------------------------------
    def embed(self, ids: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
        w = self.embed_tokens if table is None else table
        return F.embedding(ids, w) * torch.tensor(self.embed_scale, dtype=w.dtype)

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> dict[tuple[bool, int], tuple]:
        out = {}
        for spec in self.cfg.layers:
            key = (spec.sliding, spec.head_dim)
            if key not in out:
                rope = self.cfg.rope["sliding_attention" if spec.sliding else "full_attention"]
                out[key] = rope_cos_sin(inv_freq(rope, spec.head_dim), positions, dtype)
        return out

    def _window_start(self, spec: LayerSpec, cached: int) -> int:
        """First cached position the decoder sees: sliding layers keep the last (window - 1) context tokens."""
        return max(0, cached - (self.cfg.sliding_window - 1)) if spec.sliding else 0

    # -- encoder -------------------------------------------------------------------------------------------------
    def encode(self, ids: torch.Tensor, cache: KVCache) -> KVCache:
        """Causal pass over new context tokens ids (B, T) after `cache` (positions continue from cache.length).
        Returns the extended cache; the input cache is not modified."""
        p, t = cache.length, ids.shape[1]
        positions = torch.arange(p, p + t, device=ids.device)
        x = self.embed(ids, self.enc_embed_tokens)
        rope = self._cos_sin(positions, x.dtype)
        q_pos = positions[:, None]
        new = KVCache()
        for i, layer in enumerate(self.enc_layers if self.enc_layers is not None else self.layers):
            spec = self.cfg.layers[i]
            cos, sin = rope[(spec.sliding, spec.head_dim)]
            h = rms_norm(x, layer.input_layernorm, layer.eps)
            k, v = layer.self_attn.project_kv(h, cos, sin)
            if cache.keys:
                k = torch.cat([cache.keys[i], k], dim=2)
                v = torch.cat([cache.values[i], v], dim=2)
            new.keys.append(k)
            new.values.append(v)
            # Sliding layers only need keys inside the window of the first new query.
            lo = max(0, p - self.cfg.sliding_window + 1) if spec.sliding else 0
            k_pos = torch.arange(lo, p + t, device=ids.device)[None, :]
            mask = k_pos <= q_pos
            if spec.sliding:
                mask = mask & (k_pos > q_pos - self.cfg.sliding_window)
            x = layer(x, h, cos, sin, k[:, :, lo:], v[:, :, lo:], mask, decoder=False)
        return new

    # -- decoder -------------------------------------------------------------------------------------------------
    def soft_embedding(self, probs: torch.Tensor) -> torch.Tensor:
        """probs (B, C, V) softmax of the previous step's processed logits -> (B, C, H)."""
        w = self.embed_tokens
        return (probs.to(w.dtype) @ w) * torch.tensor(self.embed_scale, dtype=w.dtype)

    def decode(self, canvas: torch.Tensor, cache: KVCache, soft: torch.Tensor | None) -> torch.Tensor:
        """canvas (B, C) ids, bidirectional over itself and the cached context; soft (B, C, H) or None (first
        step: zeros). Returns soft-capped fp32 logits (B, C, V)."""
        L, c = cache.length, canvas.shape[1]
        x = self.embed(canvas)
        x = self.self_conditioning(x, torch.zeros_like(x) if soft is None else soft.to(x.dtype))
        rope = self._cos_sin(torch.arange(L, L + c, device=canvas.device), x.dtype)
        for i, layer in enumerate(self.layers):
            spec = self.cfg.layers[i]
            cos, sin = rope[(spec.sliding, spec.head_dim)]
            h = rms_norm(x, layer.input_layernorm, layer.eps)
            k, v = layer.self_attn.project_kv(h, cos, sin)
            lo = self._window_start(spec, L)
            keys = torch.cat([cache.keys[i][:, :, lo:], k], dim=2)
            values = torch.cat([cache.values[i][:, :, lo:], v], dim=2)
            x = layer(x, h, cos, sin, keys, values, None, decoder=True)
        x = rms_norm(x, self.norm, self.cfg.rms_norm_eps)
        logits = F.linear(x, self.lm_head if self.lm_head is not None else self.embed_tokens).float()
        cap = self.cfg.final_logit_softcapping
        return torch.tanh(logits / cap) * cap if cap else logits
