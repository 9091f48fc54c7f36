"""The uniform-noise denoising loss the sampler expects, with self-conditioning and an optional encoder AR loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class ObjectiveConfig:
    noise_draws: int = 4  # noisy canvases decoded per encoded context (the encoder runs once for all of them)
    self_conditioning_prob: float = 0.5  # share of batches that get a no-grad first pass as self-conditioning
    min_noise: float = 0.02  # per-example noise level t ~ U(min_noise, 1)
    ar_weight: float = 0.0  # weight of next-token loss on the encoder's context (0 = off)

    def __post_init__(self) -> None:
        if self.noise_draws < 1 or not 0 <= self.self_conditioning_prob <= 1 or not 0 <= self.min_noise < 1:
            raise ValueError("noise_draws >= 1, self_conditioning_prob in [0, 1], min_noise in [0, 1)")
        if self.ar_weight < 0:
            raise ValueError("ar_weight must be >= 0")


def corrupt(canvas: torch.Tensor, vocab_size: int, min_noise: float, gen: torch.Generator) -> torch.Tensor:
    """Replace each canvas token, with a per-example probability t ~ U(min_noise, 1), by a uniform random id.

    This is the forward process of the reference sampler, which starts from uniform ids and renoises rejected
    positions with fresh uniform ids (not a mask token)."""
    b, c = canvas.shape
    t = min_noise + (1 - min_noise) * torch.rand((b, 1), generator=gen, device=canvas.device)  # (B, 1)
    hit = torch.rand((b, c), generator=gen, device=canvas.device) < t  # (B, C)
    noise = torch.randint(0, vocab_size, (b, c), generator=gen, device=canvas.device)
    return torch.where(hit, noise, canvas)


def softcap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    logits = logits.float()
    return logits if not cap else torch.tanh(logits / cap) * cap


def decoder_logits(
    model, canvas: torch.Tensor, cache, attention_mask: torch.Tensor, sc_logits: torch.Tensor | None
) -> torch.Tensor:
    """(B, C, V) soft-capped logits of the decoder over `canvas`, reading the encoder's `cache`."""
    dec_mask = torch.cat([attention_mask, attention_mask.new_ones(canvas.shape)], dim=1)
    out = model.model.decoder(
        decoder_input_ids=canvas, cache=cache, decoder_attention_mask=dec_mask, self_conditioning_logits=sc_logits
    )
    return softcap(model.lm_head(out.last_hidden_state), model.final_logit_softcapping)


def loss_on_batch(
    model,
    context: torch.Tensor,
    attention_mask: torch.Tensor,
    canvas: torch.Tensor,
    cfg: ObjectiveConfig,
    gen: torch.Generator,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Encode each context once, decode `noise_draws` corruptions of its canvas; loss = mean CE over the canvas."""
    vocab = model.config.text_config.vocab_size
    enc = model.model.encoder(input_ids=context, attention_mask=attention_mask, use_cache=True)
    cache = enc.cache
    k = cfg.noise_draws
    if k > 1:
        cache.batch_repeat_interleave(k)
    mask = attention_mask.repeat_interleave(k, dim=0)  # (B*k, L)
    clean = canvas.repeat_interleave(k, dim=0)  # (B*k, C)
    noisy = corrupt(clean, vocab, cfg.min_noise, gen)
    sc_logits = None
    use_sc = torch.rand((), generator=gen).item() < cfg.self_conditioning_prob
    if use_sc:
        with torch.no_grad():
            sc_logits = decoder_logits(model, noisy, cache, mask, None)
    logits = decoder_logits(model, noisy, cache, mask, sc_logits)  # (B*k, C, V)
    loss = F.cross_entropy(logits.reshape(-1, vocab), clean.reshape(-1))
    stats = {"canvas_loss": loss.item(), "self_cond": float(use_sc)}
    if cfg.ar_weight > 0:
        h = enc.last_hidden_state[:, :-1]  # (B, L-1, H): predict token i+1 from the causal state at i
        ar_logits = softcap(model.lm_head(h), model.final_logit_softcapping)
        valid = (attention_mask[:, 1:] == 1) & (attention_mask[:, :-1] == 1)  # no targets read from pads
        target = context[:, 1:].masked_fill(~valid, -100)
        ar = F.cross_entropy(ar_logits.reshape(-1, vocab), target.reshape(-1), ignore_index=-100)
        loss = loss + cfg.ar_weight * ar
        stats["ar_loss"] = ar.item()
    return loss, stats
