"""The one denoising step: decoder -> sample (temperature, vocab pass, draw) -> accept -> renoise -> stopping rule
-> self-conditioning, updating a `DenoiseState` in place. Where its random numbers come from is a parameter, the
`NoiseSource`; it also draws each canvas's first ids (`DenoiseState.start`):

- `CounterNoise` (the engine's): counter-based draws (`engine.denoising.rng`) keyed by the canvas's key and step. No
  host
  sync, no Python-side state, no `torch.Generator`, shapes fixed by the canvas length and the `DecodeKV` bucket: the
  step runs eagerly, under `torch.compile(fullgraph=True)`, or as a replayed CUDA graph, and gives the same result.
- `GeneratorNoise` (reference-compatible mode): the draws and arithmetic of transformers' `generate`, from one
  `torch.Generator`, for token-identical output; eager only.

The host reads one small tensor per step (`DenoiseState.out`: the argmax canvas, the accepted count, the stop flag
and the token probabilities), the step's only host sync.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import ClassVar, Protocol

import torch

from engine.denoising import rng
from engine.denoising import sampler as S
from engine.model.kv_cache import DecodeKV
from engine.model.transformer import DiffusionGemmaText

PROB_SCALE = 1 << 30  # probabilities travel in `DenoiseState.out` (int64) as multiples of 1 / PROB_SCALE


@dataclass
class DenoiseState:
    """Everything a step reads and writes besides the weights and the context K/V. Tensors only, updated in place."""

    canvas: torch.Tensor  # (1, C) int64, the noisy canvas the decoder reads
    soft: torch.Tensor  # (1, C, H) weight dtype, self-conditioning input (zeros before the first step)
    history: torch.Tensor  # (T, 1, C) int64, the last T argmax canvases (-1 before any), T = stability threshold
    step: torch.Tensor  # () int64, steps taken on this canvas
    key: torch.Tensor  # () int64, the canvas's random key (rng.request_key)
    steps: torch.Tensor  # () int32, the step budget (the temperature schedule's N)
    t_min: torch.Tensor  # () fp32
    t_max: torch.Tensor  # () fp32
    bound: torch.Tensor  # () fp32, entropy bound
    confidence: torch.Tensor  # () fp32, the stopping rule's mean-entropy threshold
    # (2C + 2,) int64: argmax canvas, accepted this step, stopped (0/1), then each argmax token's probability at
    # temperature 1 in units of 1/PROB_SCALE (the fill's confidence: read in the step's one host read)
    out: torch.Tensor

    @classmethod
    def allocate(cls, canvas: int, hidden: int, stability: int, device: torch.device,
                 dtype: torch.dtype) -> DenoiseState:
        i64 = dict(device=device, dtype=torch.int64)
        f32 = dict(device=device, dtype=torch.float32)
        return cls(canvas=torch.zeros(1, canvas, **i64),
                   soft=torch.zeros(1, canvas, hidden, device=device, dtype=dtype),
                   history=torch.full((stability, 1, canvas), -1, **i64), step=torch.zeros((), **i64),
                   key=torch.zeros((), **i64), steps=torch.ones((), device=device, dtype=torch.int32),
                   t_min=torch.zeros((), **f32), t_max=torch.ones((), **f32), bound=torch.zeros((), **f32),
                   confidence=torch.zeros((), **f32), out=torch.zeros(2 * canvas + 2, **i64))

    def start(self, source: NoiseSource, key: int, vocab: int, steps: int, t_min: float, t_max: float,
              bound: float, confidence: float, seed: torch.Tensor | None = None, level: float = 1.0) -> None:
        """Reset for a new canvas: no self-conditioning, empty history, the first canvas drawn by `source`
        (`NoiseSource.start`: uniform random ids, or `seed` (1, C) int64 on the device corrupted at `level`)."""
        self.reset(key, steps, t_min, t_max, bound, confidence)
        self.canvas.copy_(source.start(self, vocab, seed, level))

    def reset(self, key: int, steps: int, t_min: float, t_max: float, bound: float, confidence: float) -> None:
        """Everything `start` resets but the canvas."""
        self.key.fill_(key)
        self.step.zero_()
        self.soft.zero_()
        self.history.fill_(-1)
        self.steps.fill_(steps)
        self.t_min.fill_(t_min)
        self.t_max.fill_(t_max)
        self.bound.fill_(bound)
        self.confidence.fill_(confidence)

    def copy_from(self, other: DenoiseState) -> None:
        for f in fields(self):
            getattr(self, f.name).copy_(getattr(other, f.name))


class NoiseSource(Protocol):
    """Where a canvas's random numbers come from, and the arithmetic that goes with them."""

    # Whether `sample` reads the soft-capped logits the step computes anyway (else they are freed before it runs).
    wants_capped: ClassVar[bool]
    # Device-side only (no Generator, no host state): a step with this source may be compiled or captured as a CUDA
    # graph, on a context rounded up to a bucket, and `start` may be called again to reload a run (a graph bucket
    # shared by two runs). Otherwise the step runs eagerly on the exact context and `start` is called once a canvas.
    traceable: ClassVar[bool]

    def start(self, st: DenoiseState, vocab: int, seed: torch.Tensor | None, level: float) -> torch.Tensor:
        """(1, C) the canvas's first ids, drawn after `st` was reset for it (`st.key` set, `st.step` 0): uniform
        random ids, or with `seed` (1, C) int64 the seed corrupted as the model was trained (uniform-noise
        diffusion), each position replaced by a random id with probability `level` (1: the random canvas, the seed
        unused; 0: the seed as is)."""
        ...

    def sample(self, model: DiffusionGemmaText, logits: torch.Tensor, capped: torch.Tensor | None,
               st: DenoiseState) -> S.VocabOut:
        """logits (C, V) raw head output (a source may overwrite it), capped (C, V) fp32 `model.softcap(logits)`
        when `wants_capped`, else None -> the step's temperature-scaled distribution: VocabOut with entropy, argmax,
        a sample drawn from this source (C,) and probabilities (C, V)."""
        ...

    def renoise(self, st: DenoiseState, vocab: int) -> torch.Tensor:
        """(1, C) uniform random ids for the positions this step does not accept (drawn after `sample`)."""
        ...


@dataclass(frozen=True)
class CounterNoise:
    """The engine's noise: counter-based draws keyed by (canvas key, step, stream), through `vocab_pass` (eager torch
    or the fused Triton kernel). Device-side only: traceable by torch.compile and capturable in a CUDA graph."""

    vocab_pass: S.VocabPass
    wants_capped: ClassVar[bool] = False  # the vocab pass soft-caps inside its own pass over the logits
    traceable: ClassVar[bool] = True

    def start(self, st: DenoiseState, vocab: int, seed: torch.Tensor | None, level: float) -> torch.Tensor:
        # Device-side fills only (no host-to-device copy that would wait for the device). The seed's corruption mask
        # has its own stream (`rng.SEED_MASK`): the random ids, and every later step's draws, are those of an
        # unseeded canvas with the same key.
        c = st.canvas.shape[1]
        fresh = rng.randint(rng.step_seeds(st.key, st.step, rng.INITIAL, c), vocab)[None]  # (1, C)
        if seed is None or level >= 1.0:
            return fresh
        u = rng.uniform(rng.step_seeds(st.key, st.step, rng.SEED_MASK, c))[None]  # (1, C) in (0, 1)
        return torch.where(u < level, fresh, seed)

    def sample(self, model: DiffusionGemmaText, logits: torch.Tensor, capped: torch.Tensor | None,
               st: DenoiseState) -> S.VocabOut:
        temp = S.temperature((st.steps - st.step).to(torch.int32), st.steps, st.t_min, st.t_max)
        return self.vocab_pass(logits, 1.0 / temp, model.cfg.final_logit_softcapping,
                               rng.step_seeds(st.key, st.step, rng.SAMPLE, logits.shape[0]))

    def renoise(self, st: DenoiseState, vocab: int) -> torch.Tensor:
        return rng.randint(rng.step_seeds(st.key, st.step, rng.RENOISE, st.canvas.shape[1]), vocab)[None]


class GeneratorNoise:
    """Reference-compatible mode: the draws of transformers' `generate` from one `torch.Generator`, in its order (the
    first canvas, then per step a multinomial sample, then a randint renoise), with its arithmetic: logits soft-capped
    then divided by the temperature (host-side schedule, counting down from `steps`), the entropy as
    torch.distributions.Categorical computes it, the self-conditioning probabilities from the processed logits in
    the weight dtype. One per fill: the generator runs on across its canvases, as in `generate`."""

    wants_capped: ClassVar[bool] = True  # the step's soft-capped logits are the reference's: divided here
    traceable: ClassVar[bool] = False  # a Generator: eager steps, the reference's exact arithmetic

    def __init__(self, gen: torch.Generator, steps: int, t_min: float, t_max: float) -> None:
        self.gen, self.steps, self.t_min, self.t_max = gen, steps, t_min, t_max
        self.remaining = steps  # N..1, the reference's step counter (host-side: no read of the device's)

    def start(self, st: DenoiseState, vocab: int, seed: torch.Tensor | None, level: float) -> torch.Tensor:
        self.remaining = self.steps
        return S.reference_seeded_canvas(seed, level, st.canvas.shape[1], vocab, self.gen, st.canvas.device)

    def sample(self, model: DiffusionGemmaText, logits: torch.Tensor, capped: torch.Tensor | None,
               st: DenoiseState) -> S.VocabOut:
        temp = S.temperature(self.remaining, self.steps, self.t_min, self.t_max).to(logits.device)
        self.remaining -= 1
        assert capped is not None
        processed = capped[None] / temp  # (1, C, V) fp32
        probs = torch.softmax(processed.to(model.embed_tokens.dtype), dim=-1, dtype=torch.float32)
        return S.VocabOut(S.reference_entropy(processed)[0], processed.argmax(dim=-1)[0],
                          S.reference_sample(processed, self.gen)[0], probs[0])

    def renoise(self, st: DenoiseState, vocab: int) -> torch.Tensor:
        return torch.randint(0, vocab, st.canvas.shape, generator=self.gen, device=st.canvas.device)


def denoise_step(model: DiffusionGemmaText, kv: DecodeKV, st: DenoiseState, noise: NoiseSource,
                 one_per_step: bool = False, decode: Callable | None = None) -> None:
    """One step on canvas `st` against context `kv`, its random numbers from `noise`; every result lands in `st`
    (see `DenoiseState.out`). `decode` replaces `model.decode_step` (e.g. by its torch.compile'd version)."""
    c, v = st.canvas.shape[1], model.cfg.vocab_size
    logits = (decode or model.decode_step)(st.canvas, st.soft, kv).view(c, v)  # (C, V) raw head output
    # The argmax token's probability at temperature 1 (the sampling temperature sharpens the last steps to ~1.0
    # everywhere): read before sampling, which may overwrite `logits` with its probabilities.
    # softcap is monotone: the capped maximum is the cap of the raw one (no second pass over the capped logits)
    capped = model.softcap(logits)  # (C, V) fp32: the one soft-capped copy of the step
    prob = (model.softcap(logits.amax(-1)) - torch.logsumexp(capped, -1)).exp()  # (C,)
    if not noise.wants_capped:
        capped = None  # freed before the vocab pass (which caps inside its kernel)
    out = noise.sample(model, logits, capped, st)
    entropy, argmax = out.entropy[None], out.argmax[None]  # (1, C)
    accepted = S.accept_lowest(entropy) if one_per_step else S.entropy_bound_accept(entropy, st.bound)
    renoised = noise.renoise(st, v)  # (1, C)
    stopped = S.stable_and_confident(st.history, argmax, entropy, st.confidence)
    st.canvas.copy_(torch.where(accepted, out.sample[None], renoised))  # renoise: every position not accepted
    st.soft.copy_(model.soft_embedding(out.probs[None]))
    st.step.add_(1)
    st.out[:c].copy_(argmax[0])
    st.out[c].copy_(accepted.sum())
    st.out[c + 1].copy_(stopped[0])
    st.out[c + 2:].copy_((prob * PROB_SCALE).round())
