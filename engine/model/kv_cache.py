"""The encoder's KV cache (full-attention layers keep every context token, sliding layers only their window) and
the decoder's per-canvas K/V workspace (context and canvas slots side by side, static shapes when bucketed).

Sliding layers keep the last `window - 1 + slack` tokens in order, not in a wrap-around ring: attention then sums
over keys in the reference's order, so logits stay bit-identical to transformers', and `slack` tokens of rewind
let the prefix cache restart an encode at the last chunk boundary. Memory per context is bounded by the window
on sliding layers and grows only on full-attention layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.config import LayerSpec, TextConfig


@dataclass
class KVCache:
    """Encoder keys/values per layer, (B, Hkv, n_i, D), covering context positions [length - n_i, length).

    Immutable by convention: `encode` returns a new cache, so prefix-cache entries can share tensors.
    `windows[i]` is the sliding window of layer i (None: full attention, n_i == length).
    """

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0
    windows: tuple[int | None, ...] = ()

    def start(self, i: int) -> int:
        """First context position layer i still holds."""
        return self.length - self.keys[i].shape[2]

    def rewind_floor(self) -> int:
        """The shortest prefix this cache can be truncated to exactly: an encode that resumes at position n needs
        the sliding layers' keys from n - (window - 1) on."""
        floor = 0
        for i, w in enumerate(self.windows):
            start = self.start(i)
            if w is not None and start > 0:
                floor = max(floor, start + w - 1)
        return floor

    def truncated(self, n: int) -> KVCache:
        """The cache of the first n positions (a view, no copy)."""
        if not self.rewind_floor() <= n <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} tokens to {n} (floor {self.rewind_floor()})")
        keys = [k[:, :, : n - self.start(i)] for i, k in enumerate(self.keys)]
        values = [v[:, :, : n - self.start(i)] for i, v in enumerate(self.values)]
        return KVCache(keys, values, n, self.windows)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def kept_tokens(spec: LayerSpec, window: int, slack: int, length: int) -> int:
    """Context tokens a layer keeps for a context of `length`: all of them on full-attention layers."""
    return min(length, window - 1 + slack) if spec.sliding else length


def kv_bytes(cfg: TextConfig, context_tokens: int, slack: int, element_size: int) -> int:
    """Bytes of a `KVCache` holding `context_tokens` (keys and values, every layer)."""
    return sum(2 * spec.num_kv_heads * spec.head_dim * element_size
               * kept_tokens(spec, cfg.sliding_window, slack, context_tokens) for spec in cfg.layers)


def slots(spec: LayerSpec, window: int, context_tokens: int) -> int:
    """Context slots the decoder reads on a layer: the last window - 1 tokens on sliding layers."""
    return min(context_tokens, window - 1) if spec.sliding else context_tokens


@dataclass
class DecodeKV:
    """What the decoder reads for one canvas: per layer K/V buffers (1, Hkv, P_i + C, D) with the context in slots
    [0, n_i) and the canvas, rewritten every step, in [P_i, P_i + C); a key mask (1, 1, 1, P_i + C) where
    n_i < P_i (None when every slot is used); rotary tables (C, 1, D) for the canvas positions.

    `P_i` is fixed by `capacity` for a CUDA graph or a compiled step (a bucket); an eager step allocates exactly
    n_i and needs no mask.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    masks: list[torch.Tensor | None]
    rope: dict[tuple[bool, int], tuple[torch.Tensor, torch.Tensor]]
    context_slots: tuple[int, ...]  # P_i
    canvas: int  # C
    capacity: int | None  # context capacity of full-attention layers (None: exact)

    @classmethod
    def allocate(cls, cfg: TextConfig, canvas: int, context_tokens: int, capacity: int | None,
                 device: torch.device, dtype: torch.dtype) -> DecodeKV:
        """A workspace for `canvas` positions; with `capacity`, room for any context up to that many tokens."""
        if capacity is not None and context_tokens > capacity:
            raise ValueError(f"context of {context_tokens} tokens exceeds the capacity {capacity}")
        n = context_tokens if capacity is None else capacity
        p = tuple(slots(spec, cfg.sliding_window, n) for spec in cfg.layers)
        # Masked slots must hold finite numbers (their weight is 0, and 0 * nan is nan): zeros when bucketed.
        new = torch.empty if capacity is None else torch.zeros
        keys = [new(1, s.num_kv_heads, pi + canvas, s.head_dim, device=device, dtype=dtype)
                for s, pi in zip(cfg.layers, p, strict=True)]
        values = [new(k.shape, device=device, dtype=dtype) for k in keys]
        masks = [None if capacity is None else torch.zeros(1, 1, 1, pi + canvas, dtype=torch.bool, device=device)
                 for pi in p]
        rope = {(s.sliding, s.head_dim): (torch.zeros(canvas, 1, s.head_dim, device=device, dtype=dtype),
                                          torch.zeros(canvas, 1, s.head_dim, device=device, dtype=dtype))
                for s in cfg.layers}
        return cls(keys, values, masks, rope, p, canvas, capacity)

    def fits(self, context_tokens: int) -> bool:
        return self.capacity is not None and context_tokens <= self.capacity

    def fill(self, cache: KVCache, rope: dict[tuple[bool, int], tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Copy the context (the last P_i tokens each layer reads) and the canvas rotary tables in, in place."""
        for i, (k, v) in enumerate(zip(cache.keys, cache.values, strict=True)):
            p = self.context_slots[i]
            n = min(p, k.shape[2], cache.length) if self.capacity is not None else p
            if n:
                self.keys[i][:, :, :n].copy_(k[:, :, k.shape[2] - n:])
                self.values[i][:, :, :n].copy_(v[:, :, v.shape[2] - n:])
            if self.masks[i] is not None:
                self.masks[i][..., :n].fill_(True)
                self.masks[i][..., n:p].fill_(False)
                self.masks[i][..., p:].fill_(True)
        for key, (cos, sin) in rope.items():
            if self.capacity is None:
                self.rope[key] = (cos, sin)
            else:  # a CUDA graph reads these very tensors
                self.rope[key][0].copy_(cos)
                self.rope[key][1].copy_(sin)
