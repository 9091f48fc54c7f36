"""The eager oracle of the vocabulary pass: the spec `vocab_pass.py` is tested against.

One denoising step turns raw logits (R, V) into, per row, the entropy of the processed distribution (what
entropy-bound acceptance sorts by and the stopping rule averages), its argmax (the draft canvas) and a sample
(the candidate token). "Processed" means what transformers' DiffusionGemma sampler hands to `Categorical`:
soft-capped `tanh(x / cap) * cap` (the model's `final_logit_softcapping`), then temperature-scaled.

`vocab_pass_reference` draws by Gumbel-max with noise that is a pure function of (row seed, column), from the
counter-based hash of `engine.denoising.rng` that the Triton kernel computes bit for bit. The engine itself samples with
`engine.denoising.sampler.vocab_pass_torch` where there is no Triton (same signature, inverse-CDF draws).
"""

from __future__ import annotations

import torch

from engine.denoising.rng import GOLDEN32, M32, mix32, row_seeds

__all__ = ["GOLDEN32", "gumbel_from_bits", "mix32", "noise_bits", "processed_logits", "row_seeds",
           "vocab_pass_reference"]

def processed_logits(
    logits: torch.Tensor, inv_temperature: float | torch.Tensor, softcap: float | None
) -> torch.Tensor:
    """(R, V) raw logits -> (R, V) fp32 soft-capped, temperature-scaled logits.

    `inv_temperature` is a float or an (R,) tensor (a temperature per row: requests at different steps).
    """
    z = logits.float()
    if softcap is not None:
        z = torch.tanh(z / softcap) * softcap
    if isinstance(inv_temperature, torch.Tensor):
        inv_temperature = inv_temperature.to(device=z.device, dtype=torch.float32)[:, None]  # (R, 1)
    return z * inv_temperature


def entropy_from_log_probs(logp: torch.Tensor) -> torch.Tensor:
    """(R, V) log-probabilities -> (R,) entropy in nats; columns with p = 0 (e.g. -inf logits) add nothing."""
    p = logp.exp()
    return -torch.where(p > 0, p * logp, 0.0).sum(-1)


def noise_bits(seeds: torch.Tensor, vocab: int) -> torch.Tensor:
    """(R,) int64 row seeds -> (R, V) uint32 hashes (in int64), a pure function of (seed, column).

    Two keys per row from the seed's 32-bit halves; each column is hashed twice (col ^ k1, then ^ k2), so rows
    with different keys see unrelated streams.
    """
    lo = seeds & M32
    hi = (seeds >> 32) & M32
    k1 = mix32(lo ^ mix32(hi))[:, None]  # (R, 1)
    k2 = mix32(hi ^ mix32((lo + GOLDEN32) & M32))[:, None]
    cols = torch.arange(vocab, device=seeds.device, dtype=torch.int64)[None, :]  # (1, V)
    return mix32(mix32(cols ^ k1) ^ k2)


def gumbel_from_bits(h: torch.Tensor) -> torch.Tensor:
    """uint32 hashes (in int64) -> fp32 standard Gumbel draws, -log(E) with E = -log(1 - v) ~ Exp(1).

    v = (h + 1) / 2**32 is uniform on (0, 1] and, being a float, keeps 24 significant bits down to 2**-32.
    Small v means small E means a large Gumbel value: the tail that decides which of V ~ 262k columns wins. So
    E comes from v's own digits (log1p series below 2**-7), not from 1 - v, whose fp32 spacing of 2**-24 would
    round the winners' noise to steps of a few percent. v = 1 (p = 2**-25) gives -inf: that draw never wins.
    The kernel repeats these operations in this order, so both produce the same bits.
    """
    v = (h.float() + 1.0) * 2.0**-32
    series = v * (1.0 + v * (0.5 + v * (1.0 / 3.0 + v * 0.25)))  # -log(1 - v), truncation < 1e-9 relative
    e = torch.where(v < 2.0**-7, series, -torch.log(1.0 - v))
    return -torch.log(e)


def vocab_pass_reference(
    logits: torch.Tensor,
    inv_temperature: float | torch.Tensor,
    softcap: float | None,
    seed: int | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R, V) logits -> entropy fp32 (R,), argmax int64 (R,), sample int64 (R,), probs fp32 (R, V); ties go to the
    lowest index.

    The sample is Gumbel-max over the processed logits: argmax(z + g), g = gumbel_from_bits(noise_bits(..));
    probs is softmax(z), what the kernel writes to `probs_out`.
    """
    z = processed_logits(logits, inv_temperature, softcap)  # (R, V) fp32
    logp = torch.log_softmax(z, dim=-1)
    g = gumbel_from_bits(noise_bits(row_seeds(seed, z.shape[0], z.device), z.shape[1]))
    sample = (z + g).argmax(-1)
    return entropy_from_log_probs(logp), z.argmax(-1), sample, logp.exp()


# -- quantized grouped MoE GEMM (oracle for moe_quant.py) ------------------------------------------------------------
def moe_quant_reference(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor | None,
    fmt: str,
    offsets: torch.Tensor,
    group_size: int = 128,
) -> torch.Tensor:
    """x (S, K) rows sorted by expert, a quantized weight (E, N, K), offsets (E,) cumulative row ends -> (S, N) fp32.

    Written from the storage layout alone (engine.quant.formats' docstring), one expert at a time in fp32:
    int8 q * scale (E, N, 1); fp8 e4m3 q * scale (E, N, 1); int4 packed two per byte, low nibble = even column,
    (q - zero) * scale per group of `group_size` columns, zero = 8 when none is stored.
    """
    k = x.shape[1]
    out = torch.zeros(x.shape[0], qweight.shape[1], dtype=torch.float32)
    start = 0
    for e, end in enumerate(offsets.tolist()):
        if end == start:
            continue
        if fmt == "int4":
            b = qweight[e].to(torch.int32)  # (N, ceil(K/2))
            q = torch.stack([b & 15, b >> 4], dim=-1).flatten(1)[:, :k].float()  # (N, K)
            cols = torch.arange(k) // group_size
            s = scale[e].float()[:, cols]
            z = zero[e].float()[:, cols] if zero is not None else torch.full_like(s, 8.0)
            w = (q - z) * s
        elif fmt in ("int8", "fp8"):
            w = qweight[e].float() * scale[e].float()
        else:
            raise ValueError(f"unknown format {fmt!r}")
        out[start:end] = x[start:end].float() @ w.t()
        start = end
    return out
