"""What every family's engine shares (engine.engine.Engine for DiffusionGemma, engine.families.mask_engine.MaskEngine
for the mask-diffusion families): the device and dtype a load resolves, the fill's result and drafts, and the
engine-seam members that only need the tokenizer, the prompt format and the engine's own `stream`."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from engine.model.prefix_cache import PrefixCache
from engine.seam import CancelFlag, CancelToken, PromptFormat, SettingsInForce, StateListener, StepDraft
from engine.tokens import PromptFormatError, splits_before_newline

log = logging.getLogger(__name__)


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
    confidence: float | None = None  # engine.seam.FillResult.confidence (None: cancelled)
    token_probs: list[float] = field(default_factory=list)  # per kept token (+ the eos that ended the fill)
    error: str | None = None  # engine.seam.FillResult: the embedded engine raises instead of failing a fill



class BaseEngine:
    """The members below run on what a subclass's loader sets (`tokenizer`, `infill_format`, `path`, `device`,
    `prefix_cache`, `_lock`) and on its `stream` (the fill, step by step: Drafts, the last one done with its result)."""

    tokenizer: Tokenizer | None
    infill_format: PromptFormat | None
    path: Path
    device: torch.device
    dtype: torch.dtype
    config: Any  # the family's checkpoint config: `.text` (the network's shape), `.canvas_length`
    model: Any  # the network (a torch module)
    prefix_cache: PrefixCache
    _lock: threading.RLock

    def stream(self, context_ids: list[int], canvas_length: int | None = None, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, reference_compatible: bool = False, one_per_step: bool = False,
               draft_text: bool = True, init_ids: list[int] | None = None,
               start_noise: float = 1.0) -> Iterator[Draft]:
        raise NotImplementedError

    def settings_in_force(self) -> SettingsInForce:
        raise NotImplementedError

    def check_logits(self, context_ids: list[int], canvas_length: int) -> torch.Tensor:
        """(1, C, V) logits of one pass over a canvas after `context_ids` (finite: sound weights)."""
        raise NotImplementedError

    def memory_report(self) -> dict[str, Any]:
        raise NotImplementedError

    def kv_bytes(self, context_tokens: int) -> int:
        raise NotImplementedError

    def kv_bytes_per_token(self) -> int:
        raise NotImplementedError

    def clear_prefix_cache(self) -> None:
        raise NotImplementedError

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
    def name(self) -> str:
        return self.path.name

    @property
    def prompt_format(self) -> PromptFormat:
        if self.infill_format is None:
            raise PromptFormatError(f"{self.path} has no tokenizer.json: no prompt format (use the id-based API)")
        return self.infill_format

    def new_cancel_token(self) -> CancelToken:
        return CancelToken()

    def watch_state(self, listener: StateListener) -> None:
        """In-process: the state never changes after loading, so `listener` is never called."""

    def close(self) -> None:
        """Nothing to release: the weights and caches are memory, freed with the last reference (a job queued
        before a reload may still run on this engine)."""

    def encode(self, text: str) -> list[int]:
        # encode_batch* releases the GIL while it tokenizes (Tokenizer.encode holds it for the whole text, during
        # which no other thread of the process runs); _fast skips the offsets. Same ids as encode.
        return self._tok().encode_batch_fast([text], add_special_tokens=False)[0].ids

    def decode(self, ids: list[int]) -> str:
        return self._tok().decode(ids, skip_special_tokens=False) if ids else ""

    def _text(self, ids: list[int]) -> str:
        return self.decode(ids) if self.tokenizer is not None else ""

    def context_ids(self, prefix: str, suffix: str) -> list[int]:
        return self.prompt_format.context(self.encode(prefix), self.encode(suffix))

    def infill(self, context_ids: list[int], *, canvas_length: int | None = None, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, on_step: Callable[[StepDraft], None] | None = None,
               draft_text: bool = False, init_ids: list[int] | None = None, start_noise: float = 1.0,
               reference_compatible: bool = False, one_per_step: bool = False) -> InfillResult:
        """Fill one infill request (engine.seam.InfillBackend.infill); `on_step` receives every intermediate Draft.
        Beyond the seam, for the engine's own tests and benchmarks: `canvas_length` may be None (the checkpoint's),
        `reference_compatible` and `one_per_step` (see `stream`)."""
        try:
            for draft in self.stream(context_ids, canvas_length, steps, entropy_bound, max_canvases, seed, cancel,
                                     reference_compatible, one_per_step, draft_text, init_ids, start_noise):
                if draft.done:
                    assert draft.result is not None
                    return draft.result
                if on_step is not None:
                    on_step(draft)
        except torch.OutOfMemoryError as exc:  # this fill fails; the engine keeps serving with a smaller cache
            return self._out_of_memory(exc)
        raise AssertionError("stream ended without a result")

    def _out_of_memory(self, exc: BaseException) -> InfillResult:
        """The error result of a fill that ran out of device memory, once the prefix cache is halved and emptied."""
        with self._lock:
            kept = self.prefix_cache.shrink()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        why = (f"out of memory on {self.device} ({' '.join(str(exc).split())[:160]}); the prefix cache now keeps "
               f"{kept} context(s): a shorter context, smaller weights (weights=int4) or a larger device avoids it")
        log.warning("a fill failed: %s", why)
        return InfillResult(ids=[], text="", steps=0, canvases=0, cancelled=False, reused_prefix_tokens=0, error=why)

    def infill_text(self, prefix: str, suffix: str, **kwargs) -> InfillResult:
        return self.infill(self.context_ids(prefix, suffix), **kwargs)

