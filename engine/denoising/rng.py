"""Counter-based random numbers: pure functions of (seed, counter) built from integer tensor ops.

A denoising step draws its noise from here instead of a `torch.Generator`, so the same step gives the same numbers
run eagerly, compiled by `torch.compile` (which cannot trace a Generator), or replayed from a CUDA graph (where a
Generator's state would be baked in), and it never asks the host for a seed. The Triton vocab pass hashes its
Gumbel noise with the same `mix32`, keyed by the same row seeds.

Values are uint32 held in int64 tensors. Streams: every draw is keyed by (request key, step, stream id, row), and
the stream ids below keep the sampler's, the renoiser's, the first canvas's and a seeded canvas's corruption
mask's draws apart.

The draws a step makes (`step_seeds`, `uniform`, `randint`) are custom ops, opaque to torch.compile: Inductor
would inline each hash's reused intermediates into their readers, an expression tree exponential in the number
of xorshift rounds (minutes of code generation for a few dozen integer ops on a vector of C values).
"""

from __future__ import annotations

import torch

M32 = 0xFFFFFFFF
# Per-row key derivation constant (the 32-bit golden ratio), shared with the kernel.
GOLDEN32 = 0x9E3779B9

SAMPLE, RENOISE, INITIAL, SEED_MASK = 1, 2, 3, 4


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


def _step_seeds(key: torch.Tensor, step: torch.Tensor, stream: int, rows: int) -> torch.Tensor:
    base = mix32(mix32(key ^ (stream * GOLDEN32 & M32)) ^ (step & M32))
    return torch.arange(rows, device=key.device, dtype=torch.int64).bitwise_left_shift(32) | base


def _row_hash(seeds: torch.Tensor) -> torch.Tensor:
    return mix32((seeds & M32) ^ mix32((seeds >> 32) & M32))


def _uniform(seeds: torch.Tensor) -> torch.Tensor:
    return ((_row_hash(seeds) >> 8).float() + 0.5) * 2.0**-24


def _randint(seeds: torch.Tensor, high: int) -> torch.Tensor:
    return (_row_hash(seeds) * high) >> 32


_ops = {f.__name__: torch.library.custom_op(f"dg_engine::{f.__name__.lstrip('_')}", f, mutates_args=())
        for f in (_step_seeds, _uniform, _randint)}
_ops["_step_seeds"].register_fake(lambda key, step, stream, rows: key.new_empty(rows))
_ops["_uniform"].register_fake(lambda seeds: seeds.new_empty(seeds.shape, dtype=torch.float32))
_ops["_randint"].register_fake(lambda seeds, high: seeds.new_empty(seeds.shape))


def _call(fn, *args):
    # the custom op only where torch.compile traces: eager calls skip its dispatch overhead
    return _ops[fn.__name__](*args) if torch.compiler.is_compiling() else fn(*args)


def step_seeds(key: torch.Tensor, step: torch.Tensor, stream: int, rows: int) -> torch.Tensor:
    """key, step: 0-d int64 device tensors -> (rows,) int64 row seeds (a 32-bit step seed, the row in the high half)."""
    return _call(_step_seeds, key, step, stream, rows)


def uniform(seeds: torch.Tensor) -> torch.Tensor:
    """(R,) row seeds -> (R,) fp32 uniform on (0, 1): 24 random bits, never exactly 0 or 1."""
    return _call(_uniform, seeds)


def randint(seeds: torch.Tensor, high: int) -> torch.Tensor:
    """(R,) row seeds -> (R,) int64 uniform on [0, high) by multiply-shift (bias below high / 2**32)."""
    assert 0 < high < 2**31, f"high must be in (0, 2**31), got {high}"
    return _call(_randint, seeds, high)
