"""The DiffusionGemma text transformer: a causal encoder that writes the KV cache, a bidirectional decoder that
reads it. Both share every weight (unless the checkpoint gives the encoder its own: `enc_layers`); the per-layer
`layer_scalar` buffers and self-conditioning differ."""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import LayerSpec, TextConfig
from engine.model.kv_cache import DecodeKV, KVCache, kept_tokens
from engine.model.moe import MoE
from engine.model.ops import apply_rope, inv_freq, rms_norm, rope_cos_sin

# MKL computes a one-row GEMM (a GEMV) with a kernel picked by the weight's address: the same product from a weight
# 4 bytes further along differs in its last bits (tests/engine/test_short_contexts.py). Rows of the stacked weight
# stand in for a projection of one input row only where they lie at the projection's own address modulo this.
_GEMV_ALIGN = 64


def fuse_linears(linears: list[nn.Linear], memo: dict) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]] | None:
    """Stack the weights of bias-free dense `linears` that read the same input into one (sum N_i, K) tensor and
    make each weight a view of it (no extra memory), so one GEMM computes all of them: the same bits as separate
    GEMMs on CPU for inputs of two rows or more (each output is the same dot product;
    tests/engine/test_fused_projections.py, bench.parity). Returns (stack, per-linear weights for one-row inputs):
    a one-row input runs one GEMV per linear, as the reference does, on a weight at the address alignment the
    linear's weight had when loaded (its view in the stack where the alignment agrees, else the loaded tensor,
    kept: mmap-backed file pages as transformers holds them, or a copy whose view agrees, so nothing new is
    allocated). None when any is quantized, biased or placed apart. `memo`, one per pass over a model, maps the
    memory of weights already stacked to their stack and views, so an encoder layer sharing a decoder layer's
    weights (other Parameters over the same storage) shares the stack too. Only weights alive since the pass began
    are looked up, so a key never names memory freed and reused during the pass."""
    if not all(type(lin) is nn.Linear and lin.bias is None for lin in linears):
        return None
    ws = [lin.weight for lin in linears]
    if len({(w.device, w.dtype) for w in ws}) != 1:
        return None
    key = tuple((w.device, w.data_ptr(), tuple(w.shape), w.stride()) for w in ws)
    if key not in memo:
        fused = torch.cat([w.detach() for w in ws])
        views, rows, start = [], [], 0
        for w in ws:
            view = fused[start:start + w.shape[0]]
            views.append(nn.Parameter(view, requires_grad=False))
            same = view.data_ptr() % _GEMV_ALIGN == w.data_ptr() % _GEMV_ALIGN
            rows.append(view if same else w.detach())
            start += w.shape[0]
        memo[key] = (fused, views, tuple(rows))
    fused, views, rows = memo[key]
    for lin, view in zip(linears, views, strict=True):
        lin.weight = view
    return fused, rows


def one_row(x: torch.Tensor) -> bool:
    """Whether x (..., K) holds a single row, which BLAS computes as a GEMV (see `fuse_linears`)."""
    return x.numel() == x.shape[-1]


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
        self.qkv: torch.Tensor | None = None  # (Nq + Nk [+ Nv], H) stacked q/k/v weights (fuse), else 3 GEMMs
        self.qkv_rows: tuple[torch.Tensor, ...] = ()  # q/k[/v] weights for a one-row input (fuse_linears)

    def fuse(self, memo: dict) -> None:
        stack = fuse_linears([p for p in (self.q_proj, self.k_proj, self.v_proj) if p is not None], memo)
        self.qkv, self.qkv_rows = stack if stack is not None else (None, ())

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, H) -> raw q (B, T, Hq, D), k, v (B, T, Hkv, D) before norms and rotary (v is k without v_proj)."""
        b, t, _ = x.shape
        d = self.spec.head_dim
        if self.qkv is not None and one_row(x):  # one GEMV per projection, as the reference computes it
            q, k, *v = (F.linear(x, w) for w in self.qkv_rows)
            v = v[0] if v else k
        elif self.qkv is not None:
            y = F.linear(x, self.qkv)
            nq, nk = self.q_proj.weight.shape[0], self.k_proj.weight.shape[0]
            q, k = y[..., :nq], y[..., nq:nq + nk]
            v = y[..., nq + nk:] if self.v_proj is not None else k
        else:
            q, k = self.q_proj(x), self.k_proj(x)
            v = self.v_proj(x) if self.v_proj is not None else k
        return q.view(b, t, -1, d), k.view(b, t, -1, d), v.view(b, t, -1, d)

    def finish_kv(self, raw_k: torch.Tensor, raw_v: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """raw k, v (B, T, Hkv, D) -> k, v (B, Hkv, T, D) as the cache holds them."""
        k = apply_rope(rms_norm(raw_k, self.k_norm, self.eps), cos, sin)
        v = rms_norm(raw_v, None, self.eps)
        return k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x, cos, sin, keys, values, mask, q) -> torch.Tensor:
        """x (B, T, H); keys/values (B, Hkv, S, D) already include this block's own K/V; mask (T, S) bool or None;
        q the raw (B, T, Hq, D) queries `project` gave with this block's K/V."""
        b, t, _ = x.shape
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
        self.gate_up: torch.Tensor | None = None  # (2I, H) stacked gate/up weights (fuse), else 2 GEMMs
        self.gate_up_rows: tuple[torch.Tensor, ...] = ()  # gate/up weights for a one-row input (fuse_linears)

    def fuse(self, memo: dict) -> None:
        stack = fuse_linears([self.gate_proj, self.up_proj], memo)
        self.gate_up, self.gate_up_rows = stack if stack is not None else (None, ())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up is not None and one_row(x):  # one GEMV per projection, as the reference computes it
            gate, up = (F.linear(x, w) for w in self.gate_up_rows)
        elif self.gate_up is not None:
            gate, up = F.linear(x, self.gate_up).chunk(2, dim=-1)
            gate = gate.contiguous()  # exact (erf) gelu rounds differently on a strided input
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.gelu(gate, approximate=self.approximate) * up)


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

    def forward(self, x, h, cos, sin, keys, values, mask, decoder: bool, q) -> torch.Tensor:
        """x (B, T, H) residual stream; h = input_layernorm(x) and q its raw queries, computed by the caller with
        this block's K/V (Attention.project)."""
        n = lambda t, w: rms_norm(t, w, self.eps)  # noqa: E731
        residual = x
        x = residual + n(self.self_attn(h, cos, sin, keys, values, mask, q), self.post_attention_layernorm)
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
        head faster as GEMMs of 1,024 vocabulary rows (same bits: each logit is the same dot product; measure with
        `python -m bench.engine_speed`)."""
        p = self.embed_tokens
        self.head_chunk = 1024 if p.device.type == "cpu" else None
        memo: dict = {}  # an encoder layer sharing the decoder's weights shares their stack too
        for layer in (*self.layers, *(self.enc_layers or ())):
            layer.moe.select_kernels(p.device, p.dtype)
            layer.self_attn.fuse(memo)
            layer.mlp.fuse(memo)
        self.self_conditioning.mlp.fuse(memo)

    # -- helpers -------------------------------------------------------------------------------------------------
    def embed(self, ids: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
        w = self.embed_tokens if table is None else table
        if isinstance(w, nn.Module):  # a table kept packed (engine.quant.modules.QuantTable)
            return w.lookup(ids) * torch.tensor(self.embed_scale, dtype=w.dtype)
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
        layers = self.enc_layers if self.enc_layers is not None else self.layers
        for i, layer in enumerate(layers):
            spec = self.cfg.layers[i]
            cos, sin = rope[(spec.sliding, spec.head_dim)]
            h = rms_norm(x, layer.input_layernorm, layer.eps)
            q, k, v = layer.self_attn.project(h)
            k, v = layer.self_attn.finish_kv(k, v, cos, sin)
            start = p
            if cache.keys:
                start = cache.start(i)
                k = torch.cat([cache.keys[i], k], dim=2)  # positions start .. p + t - 1
                v = torch.cat([cache.values[i], v], dim=2)
            # The last layer's output feeds no layer's K/V (the encoder's only product): only its K/V are computed.
            if i < len(layers) - 1:
                # Sliding layers only need keys inside the window of the first new query.
                lo = max(0, p - w + 1) if spec.sliding else 0
                k_pos = torch.arange(lo, p + t, device=ids.device)[None, :]
                mask = k_pos <= q_pos
                if spec.sliding:
                    mask = mask & (k_pos > q_pos - w)
                x = layer(x, h, cos, sin, k[:, :, lo - start:], v[:, :, lo - start:], mask, decoder=False, q=q)
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
        if isinstance(w, nn.Module):
            return w.mix(probs) * torch.tensor(self.embed_scale, dtype=w.dtype)
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
            q, k, v = layer.self_attn.project(h)
            k, v = layer.self_attn.finish_kv(k, v, cos, sin)
            p = kv.context_slots[i]
            kv.keys[i][:, :, p:].copy_(k)
            kv.values[i][:, :, p:].copy_(v)
            x = layer(x, h, cos, sin, kv.keys[i], kv.values[i], kv.masks[i], decoder=True, q=q)
        x = rms_norm(x, self.norm, self.cfg.rms_norm_eps)
        head = self.lm_head if self.lm_head is not None else self.embed_tokens
        if isinstance(head, nn.Module):
            return head.head(x)
        v, n = head.shape[0], self.head_chunk
        if n is None or v <= n:
            return F.linear(x, head)
        rows = x.reshape(-1, x.shape[-1])
        if torch.compiler.is_compiling():  # Inductor has each GEMM write its slice of the concatenation
            return torch.cat([F.linear(rows, head[i:i + n]) for i in range(0, v, n)], dim=-1).view(*x.shape[:-1], v)
        out = rows.new_empty(rows.shape[0], v)
        for i in range(0, v, n):  # each GEMM writes its columns in place (no copy)
            torch.mm(rows, head[i:i + n].t(), out=out[:, i:i + n])
        return out.view(*x.shape[:-1], v)

    def decode(self, canvas: torch.Tensor, cache: KVCache, soft: torch.Tensor | None) -> torch.Tensor:
        """canvas (B, C) ids, bidirectional over itself and the cached context; soft (B, C, H) or None (first
        step: zeros). Returns soft-capped fp32 logits (B, C, V)."""
        c, w = canvas.shape[1], self.embed_tokens
        kv = DecodeKV.allocate(self.cfg, c, cache.length, None, canvas.device, w.dtype)
        kv.fill(cache, self.rope_tables(cache.length, c, canvas.device, w.dtype))
        if soft is None:
            soft = torch.zeros(*canvas.shape, self.cfg.hidden_size, device=canvas.device, dtype=w.dtype)
        return self.softcap(self.decode_step(canvas, soft, kv))


# -- checkpoint names: the state-dict keys above under the names an HF checkpoint stores them (every reader, the
# safetensors one and engine.formats.gguf's, hands out HF names; transformers keeps such a map with its model too)
_SKIP = re.compile(r"^model\.encoder\.(vision_tower|embed_vision)\.|^model\.(vision_tower|embed_vision)\.")
# checkpoint suffix (after the decoder / encoder.language_model prefix) -> our parameter suffix
_RENAMES = [
    (re.compile(r"^embed_tokens\.weight$"), "embed_tokens"),
    (re.compile(r"^norm\.weight$"), "norm"),
    (re.compile(r"^self_conditioning\.pre_norm\.weight$"), "self_conditioning.pre_norm"),
    (re.compile(r"^self_conditioning\.(gate_proj|up_proj|down_proj)\.weight$"), r"self_conditioning.mlp.\1.weight"),
    (re.compile(r"^layers\.(\d+)\.self_attn\.(q_norm|k_norm)\.weight$"), r"layers.\1.self_attn.\2"),
    (re.compile(r"^layers\.(\d+)\.self_attn\.([qkvo]_proj)\.(weight|bias)$"), r"layers.\1.self_attn.\2.\3"),
    (re.compile(r"^layers\.(\d+)\.mlp\.(gate_proj|up_proj|down_proj)\.weight$"), r"layers.\1.mlp.\2.weight"),
    (re.compile(r"^layers\.(\d+)\.router\.proj\.weight$"), r"layers.\1.moe.router_proj.weight"),
    (re.compile(r"^layers\.(\d+)\.router\.scale$"), r"layers.\1.moe.router_scale"),
    (re.compile(r"^layers\.(\d+)\.router\.per_expert_scale$"), r"layers.\1.moe.per_expert_scale"),
    (re.compile(r"^layers\.(\d+)\.experts\.(gate_up_proj|down_proj)$"), r"layers.\1.moe.\2"),
    (re.compile(r"^layers\.(\d+)\.((?:input|post_attention|pre_feedforward|post_feedforward)_layernorm(?:_[12])?)"
                r"\.weight$"), r"layers.\1.\2"),
]


def map_name(name: str) -> str | None:
    """Checkpoint tensor name -> our state-dict key; None for tensors we skip (vision)."""
    if _SKIP.match(name):
        return None
    if name == "lm_head.weight":
        return "lm_head"
    m = re.match(r"^model\.(decoder|encoder\.language_model)\.layers\.(\d+)\.layer_scalar$", name)
    if m:
        return f"layers.{m.group(2)}.{'dec' if m.group(1) == 'decoder' else 'enc'}_layer_scalar"
    m = re.match(r"^model\.(?:decoder|encoder\.language_model)\.(.+)$", name)
    if not m:
        return ""
    for pattern, repl in _RENAMES:
        if pattern.match(m.group(1)):
            return pattern.sub(repl, m.group(1))
    return ""
