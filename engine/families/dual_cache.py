"""Fast-dLLM's dual cache (arXiv 2505.22618) for the mask-diffusion families, an opt-in setting (`dual_cache`: a full
pass every N steps): a full pass over the window stores every layer's K/V; the steps in between recompute only the
rows the sampler reads (the canvas, or LLaDA's current block) against the stored K/V of the prefix and suffix.
Approximate: the stored rows do not see the tokens revealed since their pass. bench.engine_speed_families measures
its agreement with the exact path and its speed."""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.families.contract import MaskModel
from engine.families.dense import WindowKV


class DualCache:
    """A `forward(i, x)` for engine.denoising.masked: full passes at step 0, every `refresh` steps and whenever the
    sampler's active range (`active(i)` -> (first, end): the canvas, or LLaDA's block) moves; row passes otherwise."""

    def __init__(self, model: MaskModel, refresh: int, active: Callable[[int], tuple[int, int]]) -> None:
        if refresh < 1:
            raise ValueError(f"dual_cache must be a refresh interval >= 1 (steps), got {refresh}")
        self.model, self.refresh, self.active = model, refresh, active
        self.kv: WindowKV | None = None
        self.span: tuple[int, int] | None = None
        self.full_passes = 0

    def __call__(self, i: int, x: torch.Tensor) -> torch.Tensor:
        a, b = self.active(i)
        new_block, self.span = self.span != (a, b), (a, b)
        if self.kv is None or new_block or i % self.refresh == 0:
            self.kv = WindowKV([], [])
            self.full_passes += 1
            return self.model(x, self.kv)
        logits = torch.zeros(*x.shape, self.model.cfg.vocab_size, dtype=self.kv.keys[0].dtype, device=x.device)
        logits[:, a:b] = self.model.rows(x, a, b, self.kv)  # rows the sampler never reads stay 0
        return logits
