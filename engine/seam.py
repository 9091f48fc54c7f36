"""The engine seam: everything the language server asks of a model, as `typing.Protocol`s.

`dg_lsp` depends only on these types. `engine.engine.Engine` (the embedded backend) satisfies them; remote
backends (the project's engine service, OpenAI-compatible servers) implement the same surface, so the server's
fill pipeline never knows which one it talks to.

A request crosses the seam like this (docs/ARCHITECTURE.md):
    prompt = backend.prompt_format                       # how this checkpoint wants a hole laid out
    ids = prompt.context(encode(prefix), encode(suffix), hole)   # the encoder context
    res = backend.infill(ids, canvas_length=..., cancel=token, on_step=...)   # engine thread
    code = prompt.answer(res.text)                       # the canvas text -> code for the hole
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

# What triggered a fill: a keystroke (inline/completion requests: debounced, superseded by the next keystroke,
# a tight post-processing budget) or a command (fill hole / rewrite selection: one applyEdit, a larger budget).
RequestKind = Literal["keystroke", "command"]


@dataclass(frozen=True)
class HoleInfo:
    """What a prompt format may say about the hole besides the code around it (chat formats use all of it; the
    FIM layout needs none of it)."""

    kind: str  # the hole's kind as the hole finder names it ("line", "statement", "block", ...)
    language: str  # LSP language id ("python", ...)
    filename: str  # the document's file name, without its directory
    lines: int = 1  # how many lines the fill is expected to span (a size hint)
    instruction: str | None = None  # what the user asked for in a rewrite (chat formats only)
    replaced: str | None = None  # the code a rewrite replaces (chat formats show it beside the instruction)
    # context from other files (chat formats show it as "related code from other files"): (path, code) per file;
    # FIM formats get it laid out in the prefix by the server instead
    related: tuple[tuple[str, str], ...] = ()


@runtime_checkable
class CancelFlag(Protocol):
    """A thread-safe flag the denoising loop checks before every step."""

    def cancel(self) -> None: ...

    @property
    def cancelled(self) -> bool: ...


class CancelToken:
    """The CancelFlag every backend hands out (`new_cancel_token`): a threading.Event, no torch needed."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


class StepDraft(Protocol):
    """What `on_step` receives after each denoising step (runs on the engine thread)."""

    step: int
    steps: int
    text: str  # the canvas so far as text ("" when `draft_text` was off)


class FillResult(Protocol):
    """The outcome of one `infill` call: a text, a cancel (`cancelled`: the caller's flag stopped it), or a failure
    (`error`: why the backend could not fill, e.g. a remote server's HTTP error; never reported as a cancel)."""

    text: str
    steps: int
    cancelled: bool
    reused_prefix_tokens: int
    timings: dict[str, float]  # at least "total_ms"
    confidence: float | None  # `fill_confidence` of the fill's tokens; None: unknown (a server without logprobs)
    error: str | None  # None unless the fill failed; then `text` is "" and `cancelled` False


def fill_confidence(token_probs: Sequence[float]) -> float | None:
    """A fill's confidence from the probability the model gave each token it kept (at temperature 1, at the last
    denoising step; the end-of-fill token counts too): their mean. Chosen by measurement: on 784 held-out holes of
    the shipped model (bench.quality's, seed 0) the mean ranked exact fills above the rest with an AUC of 0.986 and
    fills of edit similarity >= 0.5 with 0.964, against 0.985 / 0.891 for the minimum, 0.986 / 0.959 for the
    geometric mean and 0.974 (exact) for fewer steps taken. None when there are no probabilities."""
    return sum(token_probs) / len(token_probs) if token_probs else None


def seed_canvases(init_ids: list[int] | None, noise: float, length: int, vocab: int, eos_id: int,
                  pad_id: int) -> list[tuple[int, ...]]:
    """A seed (the ids a fill should start from) -> the starting ids of canvases 0, 1, ..., `length` each: the seed
    ends as the model's own answers end (one eos, then pad), and is cut into canvases of `length` ids (the last
    padded with pad). transformers' `generate(decoder_input_ids=...)` takes exactly one (1, C) canvas and neither
    pads nor truncates (another width fails in its mask); a seed shorter than the canvas here equals passing
    `seed + [eos] + [pad] * (C - len(seed) - 1)` there. Canvases past the last one start from noise, and so do
    all when there is no seed or `noise` is 1 (returns [])."""
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"start_noise must be in [0, 1], got {noise}")
    if init_ids is None or noise >= 1.0:
        return []
    if any(not 0 <= t < vocab for t in init_ids):
        raise ValueError(f"init_ids must be in [0, {vocab})")
    ids = list(init_ids) + [eos_id]
    return [tuple(ids[i:i + length] + [pad_id] * max(0, i + length - len(ids))) for i in range(0, len(ids), length)]


@runtime_checkable
class PromptFormat(Protocol):
    """How a checkpoint wants a hole laid out, and how its answer maps back to code.

    Optional beside these members (read with `getattr(fmt, "canvas_headroom", 0)`): `canvas_headroom: int`, the
    tokens an answer spends beside the code (a chat answer's fences and end of turn); a server adds it to the
    hole's target length before it picks the smallest of `canvas_lengths` that holds it."""

    @property
    def name(self) -> str: ...  # "fim" | "chat"

    @property
    def canvas_lengths(self) -> tuple[int, ...]: ...

    @property
    def max_context_tokens(self) -> int | None: ...

    def context_budget(self, requested: int) -> int:
        """The prefix + suffix token budget to use for a requested budget."""
        ...

    def context(self, prefix_ids: list[int], suffix_ids: list[int], hole: HoleInfo | None = None) -> list[int]:
        """The encoder context for a hole between `prefix_ids` and `suffix_ids`."""
        ...

    def answer(self, text: str, prefix: str = "", suffix: str = "") -> str:
        """The code for the hole from a canvas's text (chat formats strip fences and echoes here; `prefix` and
        `suffix` are the code texts around the hole, so an answer that restates them can be cut back)."""
        ...


@runtime_checkable
class InfillBackend(Protocol):
    """A loaded model that fills infill canvases. Blocking calls (`infill`) run on the engine thread; the
    properties and `encode` may be called from the event loop."""

    @property
    def model_name(self) -> str: ...

    @property
    def prompt_format(self) -> PromptFormat: ...

    @property
    def splits_before_newline(self) -> bool:
        """Whether `encode(a + b) == encode(a) + encode(b)` when `b` starts with a newline after non-whitespace
        (lets the server re-tokenize only the cursor's line of a prompt)."""
        ...

    @property
    def drafts(self) -> bool:
        """Whether `on_step` is called after every denoising step (remote OpenAI-style servers cannot)."""
        ...

    def encode(self, text: str) -> list[int]: ...

    def new_cancel_token(self) -> CancelFlag: ...

    def infill(self, context_ids: list[int], *, canvas_length: int, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, on_step: Callable[[StepDraft], None] | None = None,
               draft_text: bool = False, init_ids: list[int] | None = None, start_noise: float = 1.0) -> FillResult:
        """Fill the canvas after `context_ids`; stops within one step of `cancel.cancel()`. `init_ids` seeds the
        canvas (a rewrite starting from the code instead of from noise), each position replaced by a uniform
        random id with probability `start_noise` (1: from noise, the seed unused; 0: the seed as is); a backend
        that cannot seed fills from noise."""
        ...

    def settings_in_force(self, **overrides: Any) -> dict[str, Any]:
        """{name: {"value": v, "source": s}} for the sampler settings, eos ids and canvas length in force, for
        `dg/status` and `dg-lsp --check`; `overrides` (e.g. steps=..., entropy_bound=...; None = unset) are the
        server's settings, reported with source "setting"."""
        ...
