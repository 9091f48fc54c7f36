"""The DiffusionGemma text transformer: a causal encoder that writes the KV cache, a bidirectional decoder that
reads it. Both share every weight (unless the checkpoint gives the encoder its own: `enc_layers`); the per-layer
`layer_scalar` buffers and self-conditioning differ."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import LayerSpec, TextConfig
from engine.kv_cache import DecodeKV, KVCache, kept_tokens
from engine.moe import MoE
from engine.ops import apply_rope, inv_freq, rms_norm, rope_cos_sin


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
        self.head_chunk: int | None = None  # vocabulary rows per LM-head GEMM (None: one GEMM)

    def select_kernels(self) -> None:
        """Fix device-dependent kernel choices for where the weights now live. On CPU, MKL runs the (C, H) x (H, V)
        head about 25% faster as GEMMs of 1,024 vocabulary rows (same bits: each logit is the same dot product)."""
        p = self.embed_tokens
        self.head_chunk = 1024 if p.device.type == "cpu" else None
        for layer in (*self.layers, *(self.enc_layers or ())):
            layer.moe.select_kernels(p.device, p.dtype)

    # -- helpers -------------------------------------------------------------------------------------------------
    def embed(self, ids: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
        w = self.embed_tokens if table is None else table
        return F.embedding(ids, w) * torch.tensor(self.embed_scale, dtype=w.dtype)

    def rope_tables(self, start: int, count: int, device: torch.device,
                    dtype: torch.dtype) -> dict[tuple[bool, int], tuple[torch.Tensor, torch.Tensor]]:
        """(sliding, head_dim) -> cos, sin (count, 1, D) for positions start .. start + count - 1."""
        positions = torch.arange(start, start + count, device=device)
        out = {}
        for spec in self.cfg.layers:
            key = (spec.sliding, spec.head_dim)
            if key not in out:
                rope = self.cfg.rope["sliding_attention" if spec.sliding else "full_attention"]
                out[key] = rope_cos_sin(inv_freq(rope, spec.head_dim), positions, dtype)
        return out

    def softcap(self, logits: torch.Tensor) -> torch.Tensor:
        """Raw head output -> fp32 soft-capped logits tanh(x / cap) * cap, as transformers' forward returns them."""
        logits = logits.float()
        cap = self.cfg.final_logit_softcapping
        return torch.tanh(logits / cap) * cap if cap else logits

    # -- encoder -------------------------------------------------------------------------------------------------
    def encode(self, ids: torch.Tensor, cache: KVCache, slack: int = 0) -> KVCache:
        """Causal pass over new context tokens ids (B, T) after `cache` (positions continue from cache.length).
        Returns the extended cache, whose sliding layers keep their last window - 1 + `slack` tokens; the input
        cache is not modified."""
        p, t = cache.length, ids.shape[1]
        w = self.cfg.sliding_window
        positions = torch.arange(p, p + t, device=ids.device)
        x = self.embed(ids, self.enc_embed_tokens)
        rope = self.rope_tables(p, t, ids.device, x.dtype)
        q_pos = positions[:, None]
        new = KVCache(length=p + t, windows=tuple(w if s.sliding else None for s in self.cfg.layers))
        for i, layer in enumerate(self.enc_layers if self.enc_layers is not None else self.layers):
            spec = self.cfg.layers[i]
            cos, sin = rope[(spec.sliding, spec.head_dim)]
            h = rms_norm(x, layer.input_layernorm, layer.eps)
            k, v = layer.self_attn.project_kv(h, cos, sin)
            start = p
            if cache.keys:
                start = cache.start(i)
                k = torch.cat([cache.keys[i], k], dim=2)  # positions start .. p + t - 1
                v = torch.cat([cache.values[i], v], dim=2)
            # Sliding layers only need keys inside the window of the first new query.
            lo = max(0, p - w + 1) if spec.sliding else 0
            k_pos = torch.arange(lo, p + t, device=ids.device)[None, :]
            mask = k_pos <= q_pos
            if spec.sliding:
                mask = mask & (k_pos > q_pos - w)
            x = layer(x, h, cos, sin, k[:, :, lo - start:], v[:, :, lo - start:], mask, decoder=False)
            keep = kept_tokens(spec, w, slack, p + t)
            if keep < k.shape[2]:  # a copy, so the dropped tokens' memory is freed
                k, v = k[:, :, -keep:].clone(), v[:, :, -keep:].clone()
            new.keys.append(k)
            new.values.append(v)
        return new

    # -- decoder -------------------------------------------------------------------------------------------------
    def soft_embedding(self, probs: torch.Tensor) -> torch.Tensor:
        """probs (B, C, V) softmax of the previous step's processed logits -> (B, C, H)."""
        w = self.embed_tokens
        return (probs.to(w.dtype) @ w) * torch.tensor(self.embed_scale, dtype=w.dtype)

    def decode_step(self, canvas: torch.Tensor, soft: torch.Tensor, kv: DecodeKV) -> torch.Tensor:
        """canvas (1, C) ids, soft (1, C, H) self-conditioning input (zeros at the first step), kv the context ->
        raw head output (1, C, V) in the weight dtype (not soft-capped). Writes the canvas K/V into kv's canvas
        slots; shapes depend only on kv's bucket, so the pass can be compiled or captured."""
        x = self.embed(canvas)
        x = self.self_conditioning(x, soft.to(x.dtype))
        for i, layer in enumerate(self.layers):
            spec = self.cfg.layers[i]
            cos, sin = kv.rope[(spec.sliding, spec.head_dim)]
            h = rms_norm(x, layer.input_layernorm, layer.eps)
            k, v = layer.self_attn.project_kv(h, cos, sin)
            p = kv.context_slots[i]
            kv.keys[i][:, :, p:].copy_(k)
            kv.values[i][:, :, p:].copy_(v)
            x = layer(x, h, cos, sin, kv.keys[i], kv.values[i], kv.masks[i], decoder=True)
        x = rms_norm(x, self.norm, self.cfg.rms_norm_eps)
        head = self.lm_head if self.lm_head is not None else self.embed_tokens
        v, n = head.shape[0], self.head_chunk
        if n is None or v <= n:
            return F.linear(x, head)
        out = x.new_empty(*x.shape[:-1], v)
        for i in range(0, v, n):
            out[..., i:i + n] = F.linear(x, head[i:i + n])
        return out

    def decode(self, canvas: torch.Tensor, cache: KVCache, soft: torch.Tensor | None) -> torch.Tensor:
        """canvas (B, C) ids, bidirectional over itself and the cached context; soft (B, C, H) or None (first
        step: zeros). Returns soft-capped fp32 logits (B, C, V)."""
        c, w = canvas.shape[1], self.embed_tokens
        kv = DecodeKV.allocate(self.cfg, c, cache.length, None, canvas.device, w.dtype)
        kv.fill(cache, self.rope_tables(cache.length, c, canvas.device, w.dtype))
        if soft is None:
            soft = torch.zeros(*canvas.shape, self.cfg.hidden_size, device=canvas.device, dtype=w.dtype)
        return self.softcap(self.decode_step(canvas, soft, kv))
