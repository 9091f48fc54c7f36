"""Reference-compatible mode: the one denoising step (`engine.denoise.denoise_step`) with transformers' `generate`
as its noise source, for token-identical output. Only where the random numbers come from, and the arithmetic that
decides which ones are drawn, differ from the engine's own steps: `GeneratorNoise`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from engine import sampler as S
from engine.denoise import DenoiseState, denoise_step
from engine.kv_cache import DecodeKV, KVCache
from engine.model import DiffusionGemmaText

# What a denoising loop yields after each step: (argmax canvas ids, tokens accepted, stopped, the argmax canvas on
# the device, each argmax token's probability at temperature 1 in units of 1/PROB_SCALE), all but the device canvas
# from one host read. Only a canvas's last step's probabilities are used: the caller scales those.
StepOut = tuple[list[int], int, bool, Callable[[], torch.Tensor], list[int]]

if TYPE_CHECKING:
    from engine.engine import SampleSettings
    from engine.seam import CancelFlag


class GeneratorNoise:
    """The draws of transformers' `generate` from one `torch.Generator`, in its order (the first canvas, then per
    step a multinomial sample, then a randint renoise), with its arithmetic: logits soft-capped then divided by the
    temperature (host-side schedule, counting down from `steps`), the entropy as torch.distributions.Categorical
    computes it, the self-conditioning probabilities from the processed logits in the weight dtype."""

    def __init__(self, gen: torch.Generator, steps: int, t_min: float, t_max: float) -> None:
        self.gen, self.steps, self.t_min, self.t_max = gen, steps, t_min, t_max
        self.remaining = steps  # N..1, the reference's step counter (host-side: no read of the device's)

    wants_capped = True  # the step's soft-capped logits are the reference's: divided by the temperature here

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


def reference_steps(model: DiffusionGemmaText, cache: KVCache, length: int, st: SampleSettings,
                    gen: torch.Generator, cancel: CancelFlag | None, lock: threading.RLock,
                    seed: tuple[int, ...] | None = None, noise: float = 1.0) -> Iterator[StepOut]:
    """Like `Engine._steps`: yields a `StepOut` after each step, holding `lock` during each step and never across a
    yield; one host read per step. `seed`/`noise`: the canvas's starting ids and their corruption level, drawn as
    `S.reference_seeded_canvas` documents."""
    v, dev, wdtype = model.cfg.vocab_size, model.embed_tokens.device, model.embed_tokens.dtype
    state = DenoiseState.allocate(length, model.cfg.hidden_size, st.stability_threshold, dev, wdtype)
    state.reset(0, st.steps, st.t_min, st.t_max, st.entropy_bound, st.confidence_threshold)
    state.canvas.copy_(S.reference_seeded_canvas(seed, noise, length, v, gen, dev))
    source = GeneratorNoise(gen, st.steps, st.t_min, st.t_max)
    kv = None
    for _ in range(st.steps):
        if cancel is not None and cancel.cancelled:
            return
        with lock:
            if kv is None:
                kv = DecodeKV.allocate(model.cfg, length, cache.length, None, dev, wdtype)
                kv.fill(cache, model.rope_tables(cache.length, length, dev, wdtype))
            denoise_step(model, kv, state, source, st.one_per_step)
            host = state.out.tolist()
        yield host[:length], host[length], bool(host[length + 1]), state.out[:length][None].clone, host[length + 2:]
        if host[length + 1]:
            return
