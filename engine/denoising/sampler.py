"""Sampling rules of the DiffusionGemma denoising loop as pure tensor functions, and the vocabulary pass behind one
signature for each backend.

Uniform-noise diffusion: a canvas starts as random vocabulary ids; each step accepts the lowest-entropy positions
under an entropy bound (arXiv 2505.24857) and renoises the rest. Every rule takes and returns tensors (no host
sync), so one denoising step can be compiled or captured whole (`engine.denoising.denoise`).

The vocabulary pass turns a step's logits into entropy, argmax, a sample and the probabilities the next step's
self-conditioning needs. One signature (`VocabPass`), two backends:
- `vocab_pass_torch`: eager torch, inverse-CDF draws keyed by counter-based row seeds (`engine.denoising.rng`);
- `vocab_pass_triton`: the fused Triton kernel (`engine.kernels.vocab_pass`), Gumbel-max with hashed noise,
  its eager oracle in `engine.kernels.reference`.
`reference_*` functions reproduce the arithmetic and the random draws of transformers' `generate` exactly (the
reference-compatible mode, which draws from a `torch.Generator`).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

from engine.denoising import rng


class VocabOut(NamedTuple):
    entropy: torch.Tensor  # (R,) fp32, of the processed distribution
    argmax: torch.Tensor  # (R,) int64
    sample: torch.Tensor  # (R,) int64
    probs: torch.Tensor  # (R, V) softmax of the processed logits, for self-conditioning


class VocabPass(Protocol):
    def __call__(self, logits: torch.Tensor, inv_temperature: torch.Tensor, softcap: float | None,
                 seeds: torch.Tensor) -> VocabOut:
        """logits (R, V) raw head output (consumed: a backend may overwrite it), inv_temperature 0-d or (R,) fp32,
        seeds (R,) int64 row seeds -> VocabOut. "Processed" = tanh(x / softcap) * softcap * inv_temperature."""
        ...


def vocab_pass_torch(logits: torch.Tensor, inv_temperature: torch.Tensor, softcap: float | None,
                     seeds: torch.Tensor) -> VocabOut:
    """Eager torch: one softmax serves entropy, sampling and self-conditioning; the sample inverts the CDF at one
    uniform per row (`rng.uniform(seeds)`). About ten passes over the (R, V) logits, in place where possible;
    `logits` itself is left alone."""
    inv_t = inv_temperature[:, None] if inv_temperature.dim() else inv_temperature
    if softcap is not None:
        # softcap * tanh(x / softcap) as 2 * softcap * sigmoid(2x / softcap) - softcap: torch's CPU tanh is several
        # times slower than its sigmoid; the two agree to a few fp32 ulps of the cap
        scale = softcap * inv_t
        z = torch.sigmoid(logits.float() * (2.0 / softcap)).mul_(2 * scale).sub_(scale)
    else:
        z = logits.float() * inv_t
    m, argmax = z.max(dim=-1, keepdim=True)  # ties: the first maximal index, as torch.argmax
    d = z.sub_(m)  # (R, V) z - max; z is always a fresh tensor here
    probs = d.exp()
    s = probs.sum(dim=-1, keepdim=True)
    probs = probs.div_(s)
    # H = log(s) - sum p (z - m): shifted by the max, so entropies near the stopping threshold keep their digits
    entropy = s.squeeze(-1).log() - torch.linalg.vecdot(probs, d)
    sample = inverse_cdf(probs, rng.uniform(seeds))
    return VocabOut(entropy.clamp_min(0), argmax.squeeze(-1), sample, probs)


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor, block: int = 256) -> torch.Tensor:
    """(R, V) non-negative weights, (R,) uniforms in (0, 1) -> (R,) int64: the first index whose cumulative weight
    reaches u * total. Two levels (block sums, then one block's cumsum) instead of a cumsum over all of V; never
    a zero-weight index."""
    r, v = weights.shape
    nb = -(-v // block)
    padded = weights if nb * block == v else torch.nn.functional.pad(weights, (0, nb * block - v))
    blocks = padded.view(r, nb, block)
    mass = blocks.sum(dim=-1)  # (R, nb)
    cum = mass.cumsum(dim=-1)
    target = (u * cum[:, -1])[:, None]  # (R, 1)
    j = torch.searchsorted(cum, target).clamp_max(nb - 1)  # (R, 1) the block holding the target
    inner = blocks.gather(1, j[:, :, None].expand(r, 1, block)).squeeze(1).cumsum(dim=-1)  # (R, block)
    # rounding may put the remainder just outside (0, block total]: clamp it inside, onto a positive weight
    rest = (target - (cum.gather(1, j) - mass.gather(1, j))).clamp(min=torch.finfo(weights.dtype).tiny)
    rest = torch.minimum(rest, inner[:, -1:] * (1 - torch.finfo(weights.dtype).eps))
    k = torch.searchsorted(inner, rest)
    return (j * block + k).squeeze(1).clamp_max(v - 1)


def vocab_pass_triton(logits: torch.Tensor, inv_temperature: torch.Tensor, softcap: float | None,
                      seeds: torch.Tensor) -> VocabOut:
    """The fused Triton kernel; the probabilities overwrite the logits (no second (R, V) tensor)."""
    from engine.kernels import vocab_pass

    inv_t = inv_temperature.expand(logits.shape[0]) if not inv_temperature.dim() else inv_temperature
    entropy, argmax, sample = vocab_pass(logits, inv_t, softcap, seeds, probs_out=logits)
    return VocabOut(entropy, argmax, sample, logits)


def vocab_pass_for(backend: str) -> VocabPass:
    """"torch" or "triton" -> the backend's vocab pass."""
    return {"torch": vocab_pass_torch, "triton": vocab_pass_triton}[backend]


def temperature(step_remaining: int | torch.Tensor, steps: int | torch.Tensor, t_min: float | torch.Tensor,
                t_max: float | torch.Tensor) -> torch.Tensor:
    """Linear schedule t_max -> t_min. `step_remaining` counts down N..1 (as in the reference), computed in fp32
    the same way (int32 tensor / int) so scaled logits are bit-identical."""
    frac = torch.as_tensor(step_remaining, dtype=torch.int32) / steps
    return t_min + (t_max - t_min) * frac


def entropy_bound_accept(token_entropy: torch.Tensor, bound: float | torch.Tensor) -> torch.Tensor:
    """(B, C) entropies -> (B, C) bool: accept the k lowest-entropy positions while
    sum(H_1..H_k) - max(H_1..H_k) <= bound (sorted ascending, so the max is the last one)."""
    sorted_h, order = torch.sort(token_entropy, dim=-1, descending=False)
    keep = torch.cumsum(sorted_h, dim=-1) - sorted_h <= bound
    return torch.scatter(torch.zeros_like(keep), -1, order, keep)


def accept_lowest(token_entropy: torch.Tensor) -> torch.Tensor:
    """(B, C) -> (B, C) bool with only the lowest-entropy position accepted (the one-token-per-step baseline)."""
    return torch.zeros_like(token_entropy, dtype=torch.bool).scatter_(-1, token_entropy.argmin(-1, keepdim=True), True)


def stable_and_confident(history: torch.Tensor, argmax_canvas: torch.Tensor, token_entropy: torch.Tensor,
                         confidence: float | torch.Tensor) -> torch.Tensor:
    """The reference's StableAndConfidentStoppingCriteria: stop when the argmax canvas (B, C) equals each of the
    last T argmax canvases in `history` (T, B, C), initially -1, and the mean entropy is below `confidence`.
    Updates `history` in place (its storage stays put, as a CUDA graph needs); returns (B,) bool."""
    if history.shape[0] == 0:
        stable = torch.ones(argmax_canvas.shape[0], dtype=torch.bool, device=argmax_canvas.device)
    else:
        stable = (history == argmax_canvas[None]).all(dim=-1).all(dim=0)
        history.copy_(torch.roll(history, shifts=-1, dims=0))
        history[-1].copy_(argmax_canvas)
    return stable & (token_entropy.mean(dim=-1) < confidence)


def initial_canvas(batch: int, length: int, vocab: int, generator: torch.Generator,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=generator, device=device)


def reference_seeded_canvas(seed: torch.Tensor | None, noise: float, length: int, vocab: int,
                            generator: torch.Generator, device: torch.device | str = "cpu") -> torch.Tensor:
    """The first canvas of a denoising loop in reference-compatible mode, (1, C); `seed` (1, C) int64 on `device`.
    Unseeded (or `noise` >= 1): the random canvas `generate` draws (`initial_canvas`). Seeded with `noise` <= 0:
    `generate` still draws its random canvas (its default argument is evaluated when `decoder_input_ids` is given),
    then starts from the seed: the same draws, so token-identical to `generate(decoder_input_ids=seed)`. In
    between, one more draw comes first: u = torch.rand((1, C)) from the same generator, then the random canvas;
    each position where u < noise takes the random canvas's id. That equals `generate(decoder_input_ids=where(u <
    noise, random, seed))` run from the generator's state after u was drawn (the random canvas is the one
    `generate` itself draws next)."""
    u = None
    if seed is not None and 0 < noise < 1:
        u = torch.rand((1, length), generator=generator, device=device)
    canvas = initial_canvas(1, length, vocab, generator, device)
    if seed is None or noise >= 1:
        return canvas
    return seed if u is None else torch.where(u < noise, canvas, seed)


def reference_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of softmax(logits) over the last dim, with torch.distributions.Categorical's arithmetic."""
    norm = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(norm, dim=-1)
    return -(norm.clamp(min=torch.finfo(norm.dtype).min) * probs).sum(-1)


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
