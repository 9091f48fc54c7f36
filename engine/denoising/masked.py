"""The one denoising loop of mask-diffusion families (Dream, Open-dCoder, LLaDA): the window (prefix, canvas,
suffix) starts with the canvas as mask tokens; each step runs the model over the whole window and the family's
sampler (a parameter, `MaskSampler`) reveals some masked positions. The loop only looks at which positions hold the
mask, so generation (canvas at the end) and infill (canvas between prefix and suffix) are the same loop; a seeded
canvas (a rewrite) is a window whose canvas holds the seed with only some positions masked.

Randomness is one explicit `torch.Generator`, drawn in the order the upstream loops draw from torch's global one,
so a seeded fill gives the upstream ids (tests/engine/test_family_dream.py, test_family_llada.py transcribe them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from engine.seam import CancelFlag


class MaskSampler(Protocol):
    """One family's sampling rule. `steps`: the forward passes of a fill. `step` reveals positions of `x` in place
    from `logits` (1, L, V), aligned (row i predicts position i); `mask_index` (1, L) bool is x == mask before it."""

    @property
    def steps(self) -> int: ...

    def active(self, i: int) -> tuple[int, int]:
        """The window range [first, end) whose predictions step i reads (every mask it may reveal lies there)."""
        ...

    def step(self, i: int, x: torch.Tensor, mask_index: torch.Tensor, logits: torch.Tensor,
             gen: torch.Generator) -> None: ...


@dataclass
class MaskStep:
    """After one step: the window (1, L) and, for each position revealed at this step, the probability the model
    gave its token at temperature 1 (positions -> probability; the fill's confidence reads them)."""

    step: int
    x: torch.Tensor
    revealed: dict[int, float]


def denoise_masked(model: Callable[[int, torch.Tensor], torch.Tensor], x: torch.Tensor, mask_id: int,
                   sampler: MaskSampler, gen: torch.Generator, cancel: CancelFlag | None = None,
                   lock: Callable[[], contextlib.AbstractContextManager] | None = None) -> Iterator[MaskStep]:
    """Run `sampler.steps` steps on window `x` (1, L) int64, in place; yields a `MaskStep` after each. `model(i, x)`
    gives step i's logits (the network over the window, or a cached approximation of it). `cancel` is
    checked before every step (at most one more step runs after it is set); `lock()` (a context manager) is held
    during each step and released before each yield."""
    for i in range(sampler.steps):
        if cancel is not None and cancel.cancelled:
            return
        with lock() if lock is not None else contextlib.nullcontext():
            mask_index = x == mask_id
            logits = model(i, x)  # (1, L, V)
            sampler.step(i, x, mask_index, logits, gen)
            revealed = (mask_index & (x != mask_id))[0].nonzero().flatten()
            probs = torch.softmax(logits[0, revealed].float(), dim=-1).gather(-1, x[0, revealed][:, None])[:, 0]
            out = MaskStep(i + 1, x, dict(zip(revealed.tolist(), probs.tolist(), strict=True)))
        yield out

