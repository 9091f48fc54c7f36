"""Counter-based random numbers: pure functions of (seed, counter) built from integer tensor ops.

A denoising step draws its noise from here instead of a `torch.Generator`, so the same step gives the same numbers
run eagerly, compiled by `torch.compile` (which cannot trace a Generator), or replayed from a CUDA graph (where a
Generator's state would be baked in), and it never asks the host for a seed. The Triton vocab pass hashes its
Gumbel noise with the same `mix32`, keyed by the same row seeds.

Values are uint32 held in int64 tensors. Streams: every draw is keyed by (request key, step, stream id, row), and
the stream ids below keep the sampler's, the renoiser's and the first canvas's draws apart.

The draws a step makes (`step_seeds`, `uniform`, `randint`) are custom ops, opaque to torch.compile: Inductor
would inline each hash's reused intermediates into their readers, an expression tree exponential in the number
of xorshift rounds (minutes of code generation for a few dozen integer ops on a vector of C values).
"""

from __future__ import annotations

import torch

M32 = 0xFFFFFFFF
# Per-row key derivation constant (the 32-bit golden ratio), shared with the kernel.
GOLDEN32 = 0x9E3779B9

SAMPLE, RENOISE, INITIAL = 1, 2, 3


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    # uint32 multiply in int64 without overflow: split the constant into 16-bit halves (products < 2**48).
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & M32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """The "lowbias32" integer finaliser (C. Wellons, hash-prospector): a uint32 bijection, low bias."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def request_key(seed: int, canvas: int) -> int:
    """The 32-bit key of one canvas of one request (host side, no tensors): distinct seeds and canvases never share
    a stream."""
    h = (seed * 0x9E3779B97F4A7C15 + canvas * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 31
    h = (h * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (h ^ (h >> 29)) & M32


def row_seeds(seed: int | torch.Tensor, rows: int, device: torch.device | str) -> torch.Tensor:
    """The (R,) int64 per-row seeds the noise is keyed on.

    An int gives row r the seed `seed ^ (r << 32)`: rows of one call never share noise, and distinct seeds
    below 2**32 never collide across calls. Pass an (R,) tensor instead to make a request's draws independent
    of its row in the batch (e.g. `step_seeds`).
    """
    if isinstance(seed, torch.Tensor):
        assert seed.shape == (rows,) and seed.dtype == torch.int64, f"seeds must be ({rows},) int64"
        return seed.to(device)
    assert 0 <= seed < 2**63, f"seed must be in [0, 2**63), got {seed}"
    return torch.arange(rows, device=device, dtype=torch.int64).bitwise_left_shift(32).bitwise_xor(seed)


@torch.library.custom_op("dg_engine::step_seeds", mutates_args=())
def step_seeds(key: torch.Tensor, step: torch.Tensor, stream: int, rows: int) -> torch.Tensor:
    """key, step: 0-d int64 device tensors -> (rows,) int64 row seeds (a 32-bit step seed, the row in the high half)."""
    base = mix32(mix32(key ^ (stream * GOLDEN32 & M32)) ^ (step & M32))
    return torch.arange(rows, device=key.device, dtype=torch.int64).bitwise_left_shift(32) | base


@step_seeds.register_fake
def _(key: torch.Tensor, step: torch.Tensor, stream: int, rows: int) -> torch.Tensor:
    return key.new_empty(rows)


def _row_hash(seeds: torch.Tensor) -> torch.Tensor:
    return mix32((seeds & M32) ^ mix32((seeds >> 32) & M32))


@torch.library.custom_op("dg_engine::uniform", mutates_args=())
def uniform(seeds: torch.Tensor) -> torch.Tensor:
    """(R,) row seeds -> (R,) fp32 uniform on (0, 1): 24 random bits, never exactly 0 or 1."""
    return ((_row_hash(seeds) >> 8).float() + 0.5) * 2.0**-24


@uniform.register_fake
def _(seeds: torch.Tensor) -> torch.Tensor:
    return seeds.new_empty(seeds.shape, dtype=torch.float32)


@torch.library.custom_op("dg_engine::randint", mutates_args=())
def randint(seeds: torch.Tensor, high: int) -> torch.Tensor:
    """(R,) row seeds -> (R,) int64 uniform on [0, high) by multiply-shift (bias below high / 2**32)."""
    assert 0 < high < 2**31, f"high must be in (0, 2**31), got {high}"
    return (_row_hash(seeds) * high) >> 32


@randint.register_fake
def _(seeds: torch.Tensor, high: int) -> torch.Tensor:
    return seeds.new_empty(seeds.shape)
