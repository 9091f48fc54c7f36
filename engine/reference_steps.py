"""The denoising loop of one canvas in reference-compatible mode: random numbers drawn exactly as transformers'
`generate` draws them (multinomial, then randint, from one torch.Generator), for token-identical output."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from engine import sampler as S
from engine.denoise import PROB_SCALE
from engine.kv_cache import DecodeKV, KVCache
from engine.model import DiffusionGemmaText

# What a denoising loop yields after each step: (argmax canvas ids, tokens accepted, stopped, the argmax canvas on
# the device, each argmax token's probability at temperature 1 in units of 1/PROB_SCALE), all but the device canvas
# from one host read. Only a canvas's last step's probabilities are used: the caller scales those.
StepOut = tuple[list[int], int, bool, Callable[[], torch.Tensor], list[int]]

if TYPE_CHECKING:
    from engine.engine import SampleSettings
    from engine.seam import CancelFlag


def reference_steps(model: DiffusionGemmaText, cache: KVCache, length: int, st: SampleSettings,
                    gen: torch.Generator, cancel: CancelFlag | None, lock: threading.RLock,
                    seed: tuple[int, ...] | None = None, noise: float = 1.0) -> Iterator[StepOut]:
    """Like `Engine._steps`: yields a `StepOut` after each step, holding `lock` during each step and never across a
    yield; one host read per step. `seed`/`noise`: the canvas's starting ids and their corruption level, drawn as
    `S.reference_seeded_canvas` documents."""
    v, dev, wdtype = model.cfg.vocab_size, model.embed_tokens.device, model.embed_tokens.dtype
    canvas = S.reference_seeded_canvas(seed, noise, length, v, gen, dev)
    soft = torch.zeros(1, length, model.cfg.hidden_size, device=dev, dtype=wdtype)
    history = torch.full((st.stability_threshold, 1, length), -1, dtype=torch.long, device=dev)
    kv = None
    for remaining in range(st.steps, 0, -1):
        if cancel is not None and cancel.cancelled:
            return
        with lock:
            if kv is None:
                kv = DecodeKV.allocate(model.cfg, length, cache.length, None, dev, wdtype)
                kv.fill(cache, model.rope_tables(cache.length, length, dev, wdtype))
            logits = model.softcap(model.decode_step(canvas, soft, kv))  # (1, C, V) fp32
            processed = logits / S.temperature(remaining, st.steps, st.t_min, st.t_max).to(dev)
            argmax = processed.argmax(dim=-1)
            sample = S.reference_sample(processed, gen)
            token_entropy = S.reference_entropy(processed)
            probs = torch.softmax(processed.to(wdtype), dim=-1, dtype=torch.float32)
            accepted = (S.accept_lowest(token_entropy) if st.one_per_step
                        else S.entropy_bound_accept(token_entropy, st.entropy_bound))
            canvas = S.reference_renoise(torch.where(accepted, sample, canvas), accepted, v, gen)
            stopped = S.stable_and_confident(history, argmax, token_entropy, st.confidence_threshold)
            soft = model.soft_embedding(probs)
            prob = (logits[0].amax(-1) - torch.logsumexp(logits[0], -1)).exp()  # (C,) at temperature 1
            host = torch.cat([argmax[0], accepted.sum()[None], stopped.long(), (prob * PROB_SCALE).round().long()
                              ]).tolist()
        yield host[:length], host[length], bool(host[length + 1]), argmax.clone, host[length + 2:]
        if host[length + 1]:
            return
