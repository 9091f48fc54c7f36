"""Dream's sampler (`diffusion_generate` of HKUNLP/Dream, as in its generation_utils.py): settings under the upstream
names with the upstream defaults, and one step of its loop as a `MaskSampler` (engine.denoising.masked).

Each step: timesteps `linspace(1, eps, steps + 1)`; with alg "origin" every mask is revealed with probability
1 - s/t (all at the last step); otherwise a token is drawn for every mask (temperature, top_p, top_k), scored by
its probability ("maskgit_plus"), top1 - top2 margin ("topk_margin") or negative entropy ("entropy"), and
`int(n_masked * (1 - s/t))` of them (all at the last step) are revealed: the top-scoring ones, or a multinomial
draw over softmax(score / alg_temp) when alg_temp > 0. Draws come from the fill's generator in upstream's order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import ConfigError

ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")


@dataclass(frozen=True)
class DreamSampling:
    """`DreamGenerationConfig`'s sampler fields; `steps` None: one step per canvas token (the README demo's choice,
    and DiffuCoder's one token per step), since upstream's 512 is sized for 512-token generations."""

    alg: str = "origin"
    alg_temp: float | None = None
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    eps: float = 1e-3
    steps: int | None = None

    def __post_init__(self) -> None:
        if self.alg not in ALGS:
            raise ConfigError(f"Dream sampler alg must be one of {', '.join(ALGS)}; got {self.alg!r}")
        if self.temperature < 0 or (self.alg_temp is not None and self.alg_temp < 0):
            raise ConfigError("temperature and alg_temp must be >= 0")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k is not None and self.top_k <= 0:
            raise ConfigError(f"top_k must be > 0, got {self.top_k}")
        if not 0 < self.eps < 1:
            raise ConfigError(f"eps must be in (0, 1), got {self.eps}")
        if self.steps is not None and self.steps <= 0:
            raise ConfigError(f"steps must be > 0, got {self.steps}")


def filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches top_p (the first always kept); others get the
    dtype's minimum."""
    ordered, order = torch.sort(logits, descending=True)
    drop = torch.cumsum(torch.softmax(ordered, dim=-1), dim=-1) > top_p
    drop[..., 1:] = drop[..., :-1].clone()
    drop[..., 0] = False
    mask = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order, drop)
    return logits.masked_fill(mask, torch.finfo(logits.dtype).min)


def filter_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    kth = torch.topk(logits, min(top_k, logits.shape[-1]))[0][..., -1, None]
    return logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)


def sample_tokens(logits: torch.Tensor, s: DreamSampling, gen: torch.Generator,
                  score: str = "prob") -> tuple[torch.Tensor, torch.Tensor]:
    """(N, V) logits -> (score (N,), token (N,)): the token drawn at `temperature` (argmax at 0), scored by its
    probability ("prob"), the top-2 margin ("margin") or the negative entropy ("neg_entropy")."""
    if s.temperature > 0:
        logits = logits / s.temperature
    if s.top_p is not None and s.top_p < 1:
        logits = filter_top_p(logits, s.top_p)
    if s.top_k is not None:
        logits = filter_top_k(logits, s.top_k)
    probs = torch.softmax(logits, dim=-1)
    if s.temperature > 0 and logits.shape[0] > 0:
        # torch.distributions.Categorical(probs).sample(): renormalised, one multinomial draw per row
        norm = probs / probs.sum(-1, keepdim=True)
        x0 = torch.multinomial(norm.reshape(-1, norm.shape[-1]), 1, True, generator=gen).T.reshape(-1)
        confidence = torch.gather(probs, -1, x0[:, None])[:, 0]
    else:
        confidence, x0 = probs.max(dim=-1)
    if score == "margin":
        top = torch.sort(probs, dim=-1, descending=True)[0]
        confidence = top[:, 0] - top[:, 1]
    elif score == "neg_entropy":
        confidence = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    return confidence, x0


class DreamSampler:
    """One fill's Dream loop state: the settings and its step count (`MaskSampler`)."""

    def __init__(self, s: DreamSampling, canvas_start: int, canvas_length: int, mask_id: int) -> None:
        self.s, self.mask_id = s, mask_id
        self.steps = s.steps or canvas_length
        self.timesteps: torch.Tensor | None = None
        self.span = (canvas_start, canvas_start + canvas_length)

    def active(self, i: int) -> tuple[int, int]:
        return self.span

    def step(self, i: int, x: torch.Tensor, mask_index: torch.Tensor, logits: torch.Tensor,
             gen: torch.Generator) -> None:
        s, steps = self.s, self.steps
        if self.timesteps is None:
            self.timesteps = torch.linspace(1, s.eps, steps + 1, device=x.device)
        t, s_next = self.timesteps[i], self.timesteps[i + 1]
        mask_logits = logits[mask_index]  # (N, V)
        if s.alg == "origin":
            p_transfer = 1 - s_next / t if i < steps - 1 else 1
            x0 = torch.full_like(x[mask_index], self.mask_id)
            transfer = torch.rand(x0.shape, generator=gen, device=x.device) < p_transfer
            x0[transfer] = sample_tokens(mask_logits[transfer], s, gen)[1]
            x[mask_index] = x0
            return
        score = {"maskgit_plus": "prob", "topk_margin": "margin", "entropy": "neg_entropy"}[s.alg]
        confidence, x0 = sample_tokens(mask_logits, s, gen, score)
        n_masked = mask_index.sum() / mask_index.shape[0]  # a float tensor, as upstream computes it
        k = int(n_masked * (1 - s_next / t)) if i < steps - 1 else int(n_masked)
        if k <= 0:
            return
        full = torch.full_like(x, -torch.inf, dtype=logits.dtype)
        full[mask_index] = confidence
        if not s.alg_temp:
            chosen = torch.topk(full, k)[1]
        else:
            chosen = torch.multinomial(torch.softmax(full / s.alg_temp, dim=-1), num_samples=k, generator=gen)
        proposal = torch.full_like(x, self.mask_id)
        proposal[mask_index] = x0
        rows = torch.arange(x.shape[0], device=x.device)[:, None].expand_as(chosen)
        x[rows, chosen] = proposal[rows, chosen]
