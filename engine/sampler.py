"""Sampling rules of the DiffusionGemma denoising loop as pure tensor functions with explicit generators.

Uniform-noise diffusion: a canvas starts as random vocabulary ids; each step accepts the lowest-entropy positions
under an entropy bound (arXiv 2505.24857) and renoises the rest. `reference_*` functions reproduce the arithmetic
and the random draws of transformers' `DiffusionGemmaGenerationMixin.generate` exactly.
"""

from __future__ import annotations

import torch


def temperature(step_remaining: int, steps: int, t_min: float, t_max: float) -> torch.Tensor:
    """Linear schedule t_max -> t_min. `step_remaining` counts down N..1 (as in the reference), computed in fp32
    the same way (int32 tensor / int) so scaled logits are bit-identical."""
    frac = torch.tensor(step_remaining, dtype=torch.int32) / steps
    return t_min + (t_max - t_min) * frac


def initial_canvas(batch: int, length: int, vocab: int, generator: torch.Generator,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=generator, device=device)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of softmax(logits) over the last dim, with torch.distributions.Categorical's arithmetic."""
    norm = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(norm, dim=-1)
    return -(norm.clamp(min=torch.finfo(norm.dtype).min) * probs).sum(-1)


def entropy_bound_accept(token_entropy: torch.Tensor, bound: float) -> torch.Tensor:
    """(B, C) entropies -> (B, C) bool: accept the k lowest-entropy positions while
    sum(H_1..H_k) - max(H_1..H_k) <= bound (sorted ascending, so the max is the last one)."""
    sorted_h, order = torch.sort(token_entropy, dim=-1, descending=False)
    keep = torch.cumsum(sorted_h, dim=-1) - sorted_h <= bound
    return torch.scatter(torch.zeros_like(keep), -1, order, keep)


def renoise(accepted_canvas: torch.Tensor, accepted: torch.Tensor, vocab: int,
            generator: torch.Generator) -> torch.Tensor:
    """Replace every position not accepted this step by a fresh uniform id."""
    noise = torch.randint(0, vocab, accepted_canvas.shape, generator=generator, device=accepted_canvas.device)
    return torch.where(~accepted, noise, accepted_canvas)


class StabilityTracker:
    """Stop when the argmax canvas equals each of the last `threshold` argmax canvases and the mean entropy of
    the processed logits is below `confidence` (the reference's StableAndConfidentStoppingCriteria)."""

    def __init__(self, threshold: int, confidence: float) -> None:
        self.threshold, self.confidence = threshold, confidence
        self.history: torch.Tensor | None = None

    def update(self, argmax_canvas: torch.Tensor, token_entropy: torch.Tensor) -> torch.Tensor:
        if self.threshold == 0:
            stable = torch.ones(argmax_canvas.shape[0], dtype=torch.bool, device=argmax_canvas.device)
        else:
            if self.history is None:
                self.history = torch.full((self.threshold, *argmax_canvas.shape), -1, dtype=argmax_canvas.dtype,
                                          device=argmax_canvas.device)
            stable = (self.history == argmax_canvas[None]).all(dim=-1).all(dim=0)
            self.history = torch.roll(self.history, shifts=-1, dims=0)
            self.history[-1] = argmax_canvas
        return stable & (token_entropy.mean(dim=-1) < self.confidence)


def reference_sample(processed: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(B, C, V) temperature-scaled logits -> (B, C) ids via torch.multinomial, drawing as `generate` does."""
    b, c, v = processed.shape
    probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
    return torch.multinomial(probs.view(-1, v), num_samples=1, generator=generator).view(b, c)


def cut_at_eos(ids: list[int], eos_ids: tuple[int, ...], pad_id: int) -> tuple[list[int], bool]:
    """Generated ids up to (not including) the first eos; pads dropped. Returns (ids, hit_eos)."""
    out = []
    for t in ids:
        if t in eos_ids:
            return out, True
        if t != pad_id:
            out.append(t)
    return out, False
