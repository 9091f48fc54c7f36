"""The resident engine: load a checkpoint once, then fill infill canvases (schedule -> run -> post-process),
with a prefix KV cache across calls and cancellation between denoising steps."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from engine.base import BaseEngine, Draft, InfillResult, resolve_device, resolve_dtype  # noqa: F401 (re-exported)
from engine.config import CheckpointConfig
from engine.denoising import checked_runner, rng
from engine.denoising import sampler as S
from engine.denoising.denoise import PROB_SCALE, GeneratorNoise, NoiseSource
from engine.denoising.runner import Schedule
from engine.families.contract import MaskFamily
from engine.families.registry import family_of
from engine.formats import gguf
from engine.kernels.table import Target
from engine.loader import load_checkpoint_config, load_model, load_tokenizer
from engine.model.kv_cache import KVCache, kv_bytes
from engine.model.prefix_cache import PrefixCache
from engine.model.transformer import DiffusionGemmaText
from engine.prompts import load_prompt_format
from engine.quant.plan import resolve as resolve_weights
from engine.seam import (
    CancelFlag,
    PromptFormat,
    SettingsInForce,
    fill_confidence,
    seed_canvases,
)

log = logging.getLogger(__name__)

# Encoder chunk per device type: every chunk streams the weights once, and reuse of a cached prefix resumes at a
# chunk boundary (engine.model.prefix_cache), so a keystroke re-encodes up to one chunk. On CUDA a cold 4,096-token
# context
# takes 2 weight passes; on CPU, where a chunk costs real time, at most half the checkpoint's trained context budget.
ENCODE_CHUNK = {"cuda": 2048, "cpu": 128}


def encode_chunk_for(device: torch.device, context_budget: int | None) -> int:
    chunk = ENCODE_CHUNK.get(device.type, ENCODE_CHUNK["cpu"])
    if device.type == "cpu" and context_budget:
        chunk = min(chunk, max(16, context_budget // 2))
    return chunk


def default_model_path() -> Path:
    """The small code model shipped inside the package (used when no model is configured)."""
    return Path(__file__).resolve().parent / "default_model"


@dataclass(frozen=True)
class SampleSettings:
    """Resolved per-call sampling settings (checkpoint defaults overridden by the call)."""

    steps: int
    entropy_bound: float
    t_min: float
    t_max: float
    stability_threshold: int
    confidence_threshold: float
    one_per_step: bool = False  # left-to-right baseline: accept only the lowest-entropy position each step


class Engine(BaseEngine):
    """A loaded checkpoint that fills infill canvases. `cuda_graphs` (CUDA only) replays each denoising step from
    a CUDA graph, one per (canvas length, context capacity) bucket; `compile` runs the step through
    `torch.compile(fullgraph=True)` (first use of each bucket compiles: seconds to minutes); `encode_chunk`
    overrides the encoder chunk (`encode_chunk_for`); `prefix_cache_bytes` caps the prefix cache's memory besides
    its `prefix_cache_size` entries (`kv_bytes` gives one context's share)."""

    def __init__(self, model: DiffusionGemmaText, config: CheckpointConfig, tokenizer: Tokenizer | None,
                 infill_format: PromptFormat | None, device: torch.device, dtype: torch.dtype, path: Path,
                 prefix_cache_size: int = 4, sampler_backend: str = "auto", cuda_graphs: bool = True,
                 compile: bool = False, encode_chunk: int | None = None, prefix_cache_bytes: int | None = None) -> None:
        if sampler_backend not in ("auto", "torch", "triton"):
            raise ValueError(f"sampler_backend must be auto, torch or triton; got {sampler_backend!r}")
        self.sampler_backend = sampler_backend
        self.model, self.config, self.tokenizer = model, config, tokenizer
        self.infill_format, self.device, self.dtype, self.path = infill_format, device, dtype, path
        self.vocab_size = config.text.vocab_size
        budget = infill_format.max_context_tokens if infill_format is not None else None
        self.encode_chunk = encode_chunk or encode_chunk_for(device, budget)
        self._lock = threading.RLock()  # re-entrant: a stream closed by the GC mid-step releases its run
        self.prefix_cache = PrefixCache(prefix_cache_size, self.encode_chunk, prefix_cache_bytes)
        self.weights = "bf16"  # how the weights are stored (engine.quant.formats.FORMATS); set by from_pretrained
        self.tokenizer_source = "given" if tokenizer is not None else "none"  # said by --check; from_pretrained sets
        model.select_kernels()
        self._want = (cuda_graphs and device.type == "cuda", compile)
        self.self_check()

    def self_check(self, table: checked_runner.Table = checked_runner.default_table) -> None:
        """Check the GPU-only pieces the plan would use against their eager references (`table`: the kernel table;
        tests give doubles) and serve with those that pass (engine.denoising.checked_runner); `gpu` says which."""
        fmt = self.infill_format
        canvas = min(fmt.canvas_lengths) if fmt is not None else self.config.canvas_length
        target = Target(self.model, self.device, self.dtype, self._backend(), *self._want, canvas)
        with self._lock:
            self._runner, self.gpu = checked_runner.build(target, table)
        self.cuda_graphs, self.compile = self._runner.graphs, self._runner.compile

    @classmethod
    @gguf.reading()  # a GGUF's header parsed once for the whole load
    def from_pretrained(cls, path: str | Path | None = None, device: str | torch.device = "auto",
                        dtype: str | torch.dtype = "auto", prefix_cache_size: int = 4,
                        sampler_backend: str = "auto", prompt_format: str = "auto",
                        sampler: Mapping[str, Any] | None = None, weights: str = "auto", cuda_graphs: bool = True,
                        compile: bool = False, encode_chunk: int | None = None,
                        prefix_cache_bytes: int | None = None) -> BaseEngine:
        """`prompt_format`: "auto" | "fim" | "chat" (engine.prompts); `sampler`: settings over the checkpoint's
        generation_config.json (steps, entropy_bound, t_min, t_max, stability_threshold,
        confidence_threshold, max_new_tokens; see engine.config.apply_overrides). `weights`: auto | bf16 | int8 |
        int4 | fp8 (engine.quant.plan.resolve): auto keeps a quantized checkpoint's own format, else the widest that
        fits the device beside the KV cache; a format that cannot fit raises engine.quant.memory.FitError naming one
        that would, before anything is loaded. The rest: see the class docstring."""
        path = Path(path) if path is not None else default_model_path()
        if not path.is_dir() and not (path.is_file() and path.suffix == ".gguf"):
            raise FileNotFoundError(f"model directory {path} does not exist (nor is it a .gguf file)")
        family = family_of(path)  # engine.families.registry: a mask-diffusion family has an engine of its own
        if isinstance(family, MaskFamily):
            from engine.families.mask_engine import MaskEngine

            return MaskEngine.load(family, path, device=device, dtype=dtype, prompt_format=prompt_format,
                                   sampler=sampler, weights=weights)
        config = load_checkpoint_config(path, sampler)
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        plan = resolve_weights(weights, path, config.text, dev, dt)
        model = load_model(path, config.text, dev, dt, plan)
        side = path if path.is_dir() else path.parent  # a .gguf file's tokenizer.json and prompt files: beside it
        tokenizer, template, tok_source = load_tokenizer(path, side)
        # a checkpoint without a tokenizer serves the id-based API only (its prompt_format raises)
        fmt = None if tokenizer is None and prompt_format == "auto" else load_prompt_format(
            side, tokenizer, config, prompt_format, template)
        engine = cls(model, config, tokenizer, fmt, dev, dt, path, prefix_cache_size, sampler_backend,
                     cuda_graphs=cuda_graphs, compile=compile, encode_chunk=encode_chunk,
                     prefix_cache_bytes=prefix_cache_bytes)
        engine.weights, engine.tokenizer_source = plan.fmt, tok_source
        return engine

    def _backend(self) -> str:
        """The vocab pass: the fused Triton kernel on CUDA (or when forced), eager torch otherwise."""
        if self.sampler_backend != "auto":
            return self.sampler_backend
        if self.device.type != "cuda":
            return "torch"
        from engine import kernels

        return "triton" if kernels.available() else "torch"

    def settings_in_force(self) -> SettingsInForce:
        return {**self.config.settings_in_force(), "gpu": {"value": self.gpu.wire(), "source": "self-check"}}

    # -- settings ------------------------------------------------------------------------------------------------
    def settings(self, steps: int | None = None, entropy_bound: float | None = None,
                 one_per_step: bool = False) -> SampleSettings:
        d = self.config.sampler
        if steps is not None and steps <= 0:
            raise ValueError(f"steps must be > 0, got {steps}")
        if entropy_bound is not None and entropy_bound <= 0:
            raise ValueError(f"entropy_bound must be > 0, got {entropy_bound}")
        return SampleSettings(steps=steps or d.max_denoising_steps, entropy_bound=entropy_bound or d.entropy_bound,
                              t_min=d.t_min, t_max=d.t_max, stability_threshold=d.stability_threshold,
                              confidence_threshold=d.confidence_threshold, one_per_step=one_per_step)

    # -- checks and memory (dg-lsp --check, the checks before "ready") --------------------------------------------
    def check_logits(self, context_ids: list[int], canvas_length: int) -> torch.Tensor:
        """(1, C, V) logits of one decoder pass over an all-pad canvas after `context_ids` (finite: sound weights)."""
        with torch.inference_mode():
            cache = self.model.encode(torch.tensor([context_ids], dtype=torch.long, device=self.device), KVCache())
            canvas = torch.zeros((1, canvas_length), dtype=torch.long, device=self.device)
            return self.model.decode(canvas, cache, None)

    def memory_report(self) -> dict[str, Any]:
        """engine.quant.memory.report for this checkpoint's shape on this device."""
        from engine.quant.memory import report

        return report(self.config.text, self.device, self.dtype.itemsize)

    def kv_bytes(self, context_tokens: int) -> int:
        """Bytes of the KV cache of one context of `context_tokens` tokens (what each prefix-cache entry holds)."""
        return kv_bytes(self.config.text, context_tokens, self.encode_chunk, self.dtype.itemsize)

    def kv_bytes_per_token(self) -> int:
        """Bytes one more context token adds once a context is longer than the sliding window (+ one encoder
        chunk): only full-attention layers keep every token."""
        n = self.config.text.sliding_window + self.encode_chunk
        return self.kv_bytes(n + 1) - self.kv_bytes(n)

    # -- prefix cache --------------------------------------------------------------------------------------------
    def _encode_context(self, ids: list[int], use_cache: bool = True) -> tuple[KVCache, int]:
        """KV cache for `ids`, re-encoding only what follows the longest reusable prefix of a recent context
        (engine.model.prefix_cache: bit-identical to a cold encode). Without `use_cache` the whole context is encoded in
        one pass, as transformers' `generate` does."""
        slack = self.encode_chunk
        if not use_cache:
            return self.model.encode(torch.tensor([ids], dtype=torch.long, device=self.device), KVCache(), slack), 0
        key = tuple(ids)
        cache, reused = self.prefix_cache.lookup(key)
        for start in range(reused, len(ids), self.encode_chunk):
            piece = torch.tensor([ids[start:start + self.encode_chunk]], dtype=torch.long, device=self.device)
            cache = self.model.encode(piece, cache, slack)
        self.prefix_cache.store(key, cache)
        return cache, reused

    def clear_prefix_cache(self) -> None:
        self.prefix_cache.clear()

    @torch.inference_mode()
    def stream(self, context_ids: list[int], canvas_length: int | None = None, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, reference_compatible: bool = False,
               one_per_step: bool = False, draft_text: bool = True, init_ids: list[int] | None = None,
               start_noise: float = 1.0) -> Iterator[Draft]:
        """Yield a Draft after every denoising step; the last Draft has done=True and carries the result. The
        engine lock is taken for the encoder and for each step, and released before every yield. `init_ids` seeds
        the canvases (`seed_canvases`), each position replaced by a uniform random id with probability
        `start_noise` (the training corruption; 1: from noise, 0: the seed as is); a position the first step does
        not accept is renoised, so the seed survives where the model confidently agrees. `reference_compatible`:
        transformers' `generate` arithmetic and draws (`GeneratorNoise`), its whole context encoded in one pass."""
        if not context_ids:
            raise ValueError("context_ids must not be empty (the decoder needs at least one cached token)")
        if any(not 0 <= t < self.vocab_size for t in context_ids):
            raise ValueError(f"context ids must be in [0, {self.vocab_size})")
        if max_canvases < 1:
            raise ValueError("max_canvases must be >= 1")
        length = canvas_length or self.config.canvas_length
        if length <= 0:
            raise ValueError(f"canvas_length must be > 0, got {length}")
        st = self.settings(steps, entropy_bound, one_per_step)
        eos, pad = self.config.eos_token_ids, self.config.text.pad_token_id
        seeds = seed_canvases(init_ids, start_noise, length, self.vocab_size, eos[0], pad)
        t0 = time.perf_counter()
        # the noise source: the engine's (keyed by seed and canvas), or one generator for the whole fill
        noise: NoiseSource = self._runner.noise
        if reference_compatible:
            noise = GeneratorNoise(torch.Generator(device=self.device).manual_seed(seed), st.steps, st.t_min, st.t_max)
        with self._lock:
            cache, reused = self._encode_context(list(context_ids), use_cache=not reference_compatible)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # encode time is reported apart from decode time
        t_enc = time.perf_counter() - t0
        out: list[int] = []
        probs: list[float] = []  # the kept tokens' probabilities at their canvas's last step
        n_steps = canvases = accepted_total = 0
        hit_eos = cancelled = False
        for c in range(max_canvases):
            canvases += 1
            ids = argmax = token_probs = None
            schedule = Schedule(rng.request_key(seed, c), st.steps, st.t_min, st.t_max, st.entropy_bound,
                                st.confidence_threshold, seeds[c] if c < len(seeds) else None, start_noise)
            steps_iter = self._runner.steps(cache, length, st.stability_threshold, st.one_per_step, schedule, noise,
                                            cancel, self._lock)
            for step, (canvas_ids, n_acc, _, device_argmax, device_probs) in enumerate(steps_iter, start=1):
                argmax, token_probs = device_argmax, device_probs
                n_steps += 1
                accepted_total += n_acc
                ids, hit_eos = S.cut_at_eos(canvas_ids, eos, pad)
                yield Draft(step=step, steps=st.steps, canvas=c, ids=out + ids,
                            text=self._text(out + ids) if draft_text else "")
            cancelled = cancel is not None and cancel.cancelled
            if ids is None or cancelled:
                cancelled = True
                break
            out.extend(ids)
            # the end of the fill is a prediction too: an end of canvas (eos) counts with the tokens before it
            probs.extend(p / PROB_SCALE for p in token_probs[:len(ids) + (1 if hit_eos else 0)])
            if hit_eos or c == max_canvases - 1:
                break
            te = time.perf_counter()
            with self._lock:  # block-autoregressive: the canvas joins the context
                cache = self.model.encode(argmax(), cache, self.encode_chunk)
            t_enc += time.perf_counter() - te
        total = time.perf_counter() - t0
        result = InfillResult(
            ids=out, text=self._text(out), steps=n_steps, canvases=canvases,
            cancelled=cancelled, reused_prefix_tokens=reused,
            timings={"encode_ms": 1e3 * t_enc, "decode_ms": 1e3 * (total - t_enc), "total_ms": 1e3 * total},
            tokens_accepted_per_step=accepted_total / max(n_steps, 1),
            confidence=None if cancelled else fill_confidence(probs),
            token_probs=probs,
        )
        yield Draft(step=n_steps, steps=st.steps, canvas=canvases - 1, ids=out, text=result.text, done=True,
                    result=result)

    def generate_ids(self, context_ids: list[int], max_new_tokens: int, **kwargs) -> list[int]:
        """Reference-style generation of ceil(max_new_tokens / canvas_length) canvases (for parity checks)."""
        length = kwargs.pop("canvas_length", None) or self.config.canvas_length
        n = -(-max_new_tokens // length)
        return self.infill(context_ids, canvas_length=length, max_canvases=n, **kwargs).ids
