"""The resident engine: load a checkpoint once, then fill infill canvases (schedule -> run -> post-process),
with a prefix KV cache across calls and cancellation between denoising steps."""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from engine import sampler as S
from engine.config import CheckpointConfig, load_config
from engine.loader import load_model
from engine.model import DiffusionGemmaText, KVCache
from engine.prompts import load_prompt_format
from engine.quant.plan import resolve as resolve_weights
from engine.seam import PromptFormat
from engine.tokens import PromptFormatError, splits_before_newline


def default_model_path() -> Path:
    """The small code model shipped inside the package (used when no model is configured)."""
    return Path(__file__).resolve().parent / "default_model"


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch sees no CUDA device")
    return dev


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise ValueError(f"dtype must be one of auto, {', '.join(table)}; got {dtype!r}")
    return table[dtype]


class CancelToken:
    """Thread-safe flag the denoising loop checks before every step."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


@dataclass
class Draft:
    step: int
    steps: int
    canvas: int
    ids: list[int]
    text: str
    done: bool = False
    result: InfillResult | None = None


@dataclass
class InfillResult:
    ids: list[int]
    text: str
    steps: int
    canvases: int
    cancelled: bool
    reused_prefix_tokens: int
    timings: dict[str, float] = field(default_factory=dict)
    tokens_accepted_per_step: float = 0.0


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


class Engine:
    def __init__(self, model: DiffusionGemmaText, config: CheckpointConfig, tokenizer: Tokenizer | None,
                 infill_format: PromptFormat | None, device: torch.device, dtype: torch.dtype, path: Path,
                 prefix_cache_size: int = 4, sampler_backend: str = "auto") -> None:
        if sampler_backend not in ("auto", "torch", "triton"):
            raise ValueError(f"sampler_backend must be auto, torch or triton; got {sampler_backend!r}")
        self.sampler_backend = sampler_backend
        self.model, self.config, self.tokenizer = model, config, tokenizer
        self.infill_format, self.device, self.dtype, self.path = infill_format, device, dtype, path
        self.vocab_size = config.text.vocab_size
        self._lock = threading.Lock()
        self._prefix: OrderedDict[tuple[int, ...], KVCache] = OrderedDict()
        self._prefix_cache_size = prefix_cache_size
        self.encode_chunk = 64
        self.weights = "bf16"  # how the weights are stored (engine.quant.formats.FORMATS); set by from_pretrained

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, device: str | torch.device = "auto",
                        dtype: str | torch.dtype = "auto", prefix_cache_size: int = 4,
                        sampler_backend: str = "auto", prompt_format: str = "auto",
                        sampler: Mapping[str, Any] | None = None, weights: str = "auto") -> Engine:
        """`prompt_format`: "auto" | "fim" | "chat" (engine.prompts); `sampler`: settings over the checkpoint's
        generation_config.json (steps, entropy_bound, t_min, t_max, stability_threshold,
        confidence_threshold, max_new_tokens; see engine.config.apply_overrides). `weights`: auto | bf16 | int8 |
        int4 | fp8 (engine.quant.plan.resolve): auto keeps a quantized checkpoint's own format, else the widest that
        fits the device beside the KV cache; a format that cannot fit raises engine.quant.memory.FitError naming one
        that would, before anything is loaded."""
        path = Path(path) if path is not None else default_model_path()
        if not path.is_dir():
            raise FileNotFoundError(f"model directory {path} does not exist")
        config = load_config(path, sampler)
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        plan = resolve_weights(weights, path, config.text, dev, dt)
        model = load_model(path, config.text, dev, dt, plan)
        tok_file = path / "tokenizer.json"
        tokenizer = Tokenizer.from_file(str(tok_file)) if tok_file.is_file() else None
        # a checkpoint without a tokenizer serves the id-based API only (its prompt_format raises)
        fmt = None if tokenizer is None and prompt_format == "auto" else load_prompt_format(
            path, tokenizer, config, prompt_format)
        engine = cls(model, config, tokenizer, fmt, dev, dt, path, prefix_cache_size, sampler_backend)
        engine.weights = plan.fmt
        return engine

    # -- text ----------------------------------------------------------------------------------------------------
    def _tok(self) -> Tokenizer:
        if self.tokenizer is None:
            raise RuntimeError(f"checkpoint {self.path} has no tokenizer.json; use the id-based API")
        return self.tokenizer

    @functools.cached_property
    def splits_before_newline(self) -> bool:
        """Whether `encode` may tokenize a text in two parts at a newline after non-whitespace (see
        `engine.tokens.splits_before_newline`)."""
        return self.tokenizer is not None and splits_before_newline(self.tokenizer)

    # -- the engine seam (engine.seam.InfillBackend) ---------------------------------------------------------------
    @property
    def model_name(self) -> str:
        return self.path.name

    @property
    def prompt_format(self) -> PromptFormat:
        if self.infill_format is None:
            raise PromptFormatError(f"{self.path} has no tokenizer.json: no prompt format (use the id-based API)")
        return self.infill_format

    @property
    def drafts(self) -> bool:
        return True

    def new_cancel_token(self) -> CancelToken:
        return CancelToken()

    def settings_in_force(self, **overrides: Any) -> dict[str, dict[str, Any]]:
        return self.config.settings_in_force(**overrides)

    def encode(self, text: str) -> list[int]:
        return self._tok().encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok().decode(ids, skip_special_tokens=False) if ids else ""

    def _text(self, ids: list[int]) -> str:
        return self.decode(ids) if self.tokenizer is not None else ""

    def context_ids(self, prefix: str, suffix: str) -> list[int]:
        return self.prompt_format.context(self.encode(prefix), self.encode(suffix))

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

    # -- prefix cache --------------------------------------------------------------------------------------------
    def _encode_context(self, ids: list[int], use_cache: bool = True) -> tuple[KVCache, int]:
        """KV cache for `ids`, re-encoding only what follows the longest common prefix with a recent context.

        Contexts are always encoded in chunks that start at multiples of `encode_chunk`, and reuse restarts at
        such a boundary: every chunk then sees exactly the inputs and shapes of a cold encode, so a fill served
        from the prefix cache is bit-identical to a cold one (not merely close). Without `use_cache` the whole
        context is encoded in one pass, as transformers' `generate` does."""
        if not use_cache:
            return self.model.encode(torch.tensor([ids], dtype=torch.long, device=self.device), KVCache()), 0
        best_key, best = None, 0
        for key in self._prefix:
            n = min(len(key), len(ids))
            lcp = 0
            while lcp < n and key[lcp] == ids[lcp]:
                lcp += 1
            if lcp > best:
                best_key, best = key, lcp
        chunk = self.encode_chunk
        if best < len(ids) or best_key is None or len(best_key) != len(ids):
            best -= best % chunk
        cache = self._prefix[best_key].truncated(best) if best_key is not None and best else KVCache()
        for start in range(best, len(ids), chunk):
            piece = torch.tensor([ids[start:start + chunk]], dtype=torch.long, device=self.device)
            cache = self.model.encode(piece, cache)
        key = tuple(ids)
        self._prefix[key] = cache
        self._prefix.move_to_end(key)
        while len(self._prefix) > self._prefix_cache_size:
            self._prefix.popitem(last=False)
        return cache, best

    def clear_prefix_cache(self) -> None:
        self._prefix.clear()

    # -- the denoising loop --------------------------------------------------------------------------------------
    def _use_kernel(self, reference: bool) -> bool:
        """The fused Triton vocab pass on CUDA (or when forced); the eager torch path otherwise."""
        if reference or self.sampler_backend == "torch":
            return False
        if self.sampler_backend == "triton":
            return True
        if self.device.type != "cuda":
            return False
        from engine import kernels

        return kernels.available()

    def _canvas_steps(self, cache: KVCache, length: int, st: SampleSettings, gen: torch.Generator,
                      reference: bool, cancel: CancelToken | None) -> Iterator[tuple[torch.Tensor, int, bool]]:
        """Denoise one canvas; yields (argmax canvas (1, C), tokens accepted this step, stopped) after each step."""
        model, v = self.model, self.vocab_size
        canvas = S.initial_canvas(1, length, v, gen, self.device)
        kernel = None
        if self._use_kernel(reference):
            from engine.kernels import vocab_pass as kernel
            # kernel noise seeds come from a CPU generator: drawing them never syncs with the device
            first = torch.randint(0, 2**62, (1,), generator=gen, device=gen.device)
            seeds = torch.Generator().manual_seed(int(first.item()))
        soft = None
        tracker = S.StabilityTracker(st.stability_threshold, st.confidence_threshold)
        wdtype = model.embed_tokens.dtype
        for remaining in range(st.steps, 0, -1):
            if cancel is not None and cancel.cancelled:
                return
            logits = model.decode(canvas, cache, soft)  # (1, C, V) fp32, soft-capped
            temp = S.temperature(remaining, st.steps, st.t_min, st.t_max)
            processed = logits / temp.to(logits.device)
            if kernel is not None:
                # one pass over the logits: entropy, argmax and a Gumbel-max sample; probs only for self-conditioning
                seed = int(torch.randint(0, 2**62, (1,), generator=seeds))
                h, amax, sample = kernel(logits.view(-1, v), 1.0 / float(temp), None, seed)
                token_entropy, argmax, sample = h.view(1, -1), amax.view(1, -1), sample.view(1, -1)
                probs = torch.softmax(processed, dim=-1)
            elif reference:
                argmax = processed.argmax(dim=-1)
                sample = S.reference_sample(processed, gen)
                token_entropy = S.entropy(processed)
                probs = torch.softmax(processed.to(wdtype), dim=-1, dtype=torch.float32)
            else:
                # One softmax serves entropy, sampling and self-conditioning.
                argmax = processed.argmax(dim=-1)
                lse = processed.logsumexp(dim=-1, keepdim=True)
                probs = torch.exp(processed - lse)
                token_entropy = (lse.squeeze(-1) - (probs * processed).sum(-1)).clamp_min(0)
                u = torch.rand(canvas.shape, generator=gen, device=canvas.device)
                cdf = probs.cumsum(dim=-1)
                sample = torch.searchsorted(cdf, (u * cdf[..., -1]).unsqueeze(-1)).squeeze(-1).clamp_max(v - 1)
            if st.one_per_step:
                accepted = torch.zeros_like(canvas, dtype=torch.bool)
                accepted.scatter_(-1, token_entropy.argmin(dim=-1, keepdim=True), True)
            else:
                accepted = S.entropy_bound_accept(token_entropy, st.entropy_bound)
            canvas = S.renoise(torch.where(accepted, sample, canvas), accepted, v, gen)
            stopped = bool(tracker.update(argmax, token_entropy).all())
            soft = model.soft_embedding(probs)
            yield argmax, int(accepted.sum()), stopped
            if stopped:
                return

    @torch.inference_mode()
    def stream(self, context_ids: list[int], canvas_length: int | None = None, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelToken | None = None, reference_compatible: bool = False,
               one_per_step: bool = False, draft_text: bool = True) -> Iterator[Draft]:
        """Yield a Draft after every denoising step; the last Draft has done=True and carries the result."""
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
        with self._lock:
            t0 = time.perf_counter()
            gen = torch.Generator(device=self.device).manual_seed(seed)
            cache, reused = self._encode_context(list(context_ids), use_cache=not reference_compatible)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # encode time is reported apart from decode time
            t_enc = time.perf_counter() - t0
            out: list[int] = []
            n_steps = canvases = accepted_total = 0
            hit_eos = cancelled = False
            for c in range(max_canvases):
                canvases += 1
                argmax = None
                for step, (argmax, n_acc, _) in enumerate(
                        self._canvas_steps(cache, length, st, gen, reference_compatible, cancel), start=1):
                    n_steps += 1
                    accepted_total += n_acc
                    ids, _ = S.cut_at_eos(argmax[0].tolist(), eos, pad)
                    yield Draft(step=step, steps=st.steps, canvas=c, ids=out + ids,
                                text=self._text(out + ids) if draft_text else "")
                cancelled = cancel is not None and cancel.cancelled
                if argmax is None or cancelled:
                    cancelled = True
                    break
                ids, hit_eos = S.cut_at_eos(argmax[0].tolist(), eos, pad)
                out.extend(ids)
                if hit_eos or c == max_canvases - 1:
                    break
                te = time.perf_counter()
                cache = self.model.encode(argmax, cache)  # block-autoregressive: the canvas joins the context
                t_enc += time.perf_counter() - te
            total = time.perf_counter() - t0
            result = InfillResult(
                ids=out, text=self._text(out), steps=n_steps, canvases=canvases,
                cancelled=cancelled, reused_prefix_tokens=reused,
                timings={"encode_ms": 1e3 * t_enc, "decode_ms": 1e3 * (total - t_enc), "total_ms": 1e3 * total},
                tokens_accepted_per_step=accepted_total / max(n_steps, 1),
            )
            yield Draft(step=n_steps, steps=st.steps, canvas=canvases - 1, ids=out, text=result.text, done=True,
                        result=result)

    def infill(self, context_ids: list[int], *, on_step: Callable[[Draft], None] | None = None,
               **kwargs) -> InfillResult:
        """Fill one infill request; `on_step` receives every intermediate Draft. See `stream` for arguments."""
        kwargs.setdefault("draft_text", on_step is not None)
        for draft in self.stream(context_ids, **kwargs):
            if draft.done:
                assert draft.result is not None
                return draft.result
            if on_step is not None:
                on_step(draft)
        raise AssertionError("stream ended without a result")

    def infill_text(self, prefix: str, suffix: str, **kwargs) -> InfillResult:
        return self.infill(self.context_ids(prefix, suffix), **kwargs)

    def generate_ids(self, context_ids: list[int], max_new_tokens: int, **kwargs) -> list[int]:
        """Reference-style generation of ceil(max_new_tokens / canvas_length) canvases (for parity checks)."""
        length = kwargs.pop("canvas_length", None) or self.config.canvas_length
        n = -(-max_new_tokens // length)
        return self.infill(context_ids, canvas_length=length, max_canvases=n, **kwargs).ids
