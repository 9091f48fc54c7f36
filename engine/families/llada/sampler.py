"""LLaDA's sampler (`generate` of ML-GSAI/LLaDA generate.py): settings under the upstream names and one step of its
loop as a `MaskSampler` (engine.denoising.masked).

The canvas is decoded block by block (`block_length`; semi-autoregressive when shorter than the canvas), the
steps split evenly between blocks, and within a block the same number of tokens revealed each step (the
remainder spread over the first steps). Each step the token is the argmax of the logits with Gumbel noise computed
in float64 (`exp(logits) / (-log u) ** temperature`; none at temperature 0), scored by its softmax probability
("low_confidence") or by a uniform draw ("random"); positions after the current block never win. Draws come from
the fill's generator in upstream's order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import ConfigError

REMASKING = ("low_confidence", "random")


@dataclass(frozen=True)
class LLaDASampling:
    """`generate`'s arguments; `steps`/`block_length` None: one step per canvas token, one block per canvas."""

    remasking: str = "low_confidence"
    block_length: int | None = None
    steps: int | None = None
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if self.remasking not in REMASKING:
            raise ConfigError(f"LLaDA remasking must be one of {', '.join(REMASKING)}; got {self.remasking!r}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        for name in ("block_length", "steps"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be > 0, got {value}")


def transfer_counts(masked: int, steps: int) -> list[int]:
    """Tokens revealed at each of `steps` steps of a block holding `masked` masks (get_num_transfer_tokens)."""
    base, extra = divmod(masked, steps)
    return [base + (1 if j < extra else 0) for j in range(steps)]


def gumbel_argmax(logits: torch.Tensor, temperature: float, gen: torch.Generator) -> torch.Tensor:
    """Upstream's `add_gumbel_noise` then argmax: float64 noise, exp(logits) / (-log u) ** temperature."""
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    wide = logits.to(torch.float64)
    u = torch.rand(wide.shape, dtype=torch.float64, generator=gen, device=wide.device)
    return torch.argmax(wide.exp() / (-torch.log(u)) ** temperature, dim=-1)


class LLaDASampler:
    """One fill's LLaDA loop state (`MaskSampler`): its blocks and the tokens each step of a block reveals."""

    def __init__(self, s: LLaDASampling, canvas_start: int, canvas_length: int, mask_id: int) -> None:
        block = s.block_length or canvas_length
        steps = s.steps or canvas_length
        if canvas_length % block:
            raise ConfigError(f"LLaDA block_length {block} must divide the canvas length {canvas_length}")
        blocks = canvas_length // block
        if steps % blocks:
            raise ConfigError(f"LLaDA steps {steps} must be a multiple of the {blocks} blocks of the canvas")
        self.s, self.start, self.block, self.mask_id = s, canvas_start, block, mask_id
        self.per_block = steps // blocks
        self.steps = steps
        self.counts: list[int] = []

    def active(self, i: int) -> tuple[int, int]:
        """The current block: masks after it never win, and earlier blocks hold none."""
        first = self.start + (i // self.per_block) * self.block
        return first, first + self.block

    def step(self, i: int, x: torch.Tensor, mask_index: torch.Tensor, logits: torch.Tensor,
             gen: torch.Generator) -> None:
        b, j = divmod(i, self.per_block)
        end = self.start + (b + 1) * self.block
        if j == 0:
            self.counts = transfer_counts(int((x[0, end - self.block:end] == self.mask_id).sum()), self.per_block)
        x0 = gumbel_argmax(logits, self.s.temperature, gen)  # (1, L)
        if self.s.remasking == "low_confidence":
            p = torch.softmax(logits, dim=-1)
            score = torch.gather(p, -1, x0[..., None])[..., 0]
        else:
            score = torch.rand(x0.shape, generator=gen, device=x0.device)
        score[:, end:] = -torch.inf
        x0 = torch.where(mask_index, x0, x)
        confidence = torch.where(mask_index, score, -torch.inf)
        chosen = torch.topk(confidence[0], k=self.counts[j])[1]
        x[0, chosen] = x0[0, chosen]
