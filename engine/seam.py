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

    @property
    def step(self) -> int: ...  # 1, 2, ...: the step of the current canvas (each canvas of a fill starts at 1)

    @property
    def steps(self) -> int: ...  # the step budget of one canvas (the `steps` in force)

    @property
    def text(self) -> str: ...  # the fill so far as text ("" when `draft_text` was off)


class FillResult(Protocol):
    """The outcome of one `infill` call: a text, a cancel, or a failure -- exactly one of them.

    - a fill: `text` (the canvases' text, cut at the end token), `error` None, `cancelled` False;
    - a cancel: `cancelled` True, `text` "", `error` None -- only when the caller's flag stopped it (or, for the
      engine service, the same client's newer fill superseded it there);
    - a failure: `error` says why the backend could not fill (a server's HTTP error, a dropped connection, a
      server that went away), `text` "", `cancelled` False. Never reported as a cancel.

    Every backend gives every field the same meaning:
    - `steps`: denoising steps that ran for this fill, summed over its canvases (what the server counts as
      `on_step` calls). A server that does not report steps (an OpenAI-compatible one) counts the streamed pieces
      it received (one per committed canvas on vLLM), so `steps` >= 1 for any non-empty fill;
    - `timings["total_ms"]`: wall time of the whole `infill` call as the caller saw it, from the call to its
      return, in milliseconds (a remote backend: including the HTTP round trip). Other keys are backend-specific
      parts of it (`encode_ms`, `decode_ms`, ...);
    - `reused_prefix_tokens`: context tokens whose KV came from the prefix cache (0 when unknown);
    - `confidence`: see `fill_confidence`; None: unknown (cancelled, failed, or a server without logprobs).
    """

    @property
    def text(self) -> str: ...

    @property
    def steps(self) -> int: ...

    @property
    def cancelled(self) -> bool: ...

    @property
    def reused_prefix_tokens(self) -> int: ...

    @property
    def timings(self) -> dict[str, float]: ...  # always has "total_ms"

    @property
    def confidence(self) -> float | None: ...

    @property
    def error(self) -> str | None: ...


# {name: {"value": v, "source": s}}: a sampler setting, the eos ids, the canvas length or the calibrated
# min_confidence in force, with where its value came from (engine.config.CheckpointConfig.settings_in_force)
SettingsInForce = dict[str, dict[str, Any]]

# (state "ready" | "error", message): what a backend's `watch_state` listener hears
StateListener = Callable[[str, str], None]


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
    """How a checkpoint wants a hole laid out, and how its answer maps back to code."""

    @property
    def name(self) -> str: ...  # "fim" | "chat"

    @property
    def canvas_headroom(self) -> int:
        """The tokens an answer spends beside the code (a chat answer's fences and end of turn; 0 for FIM): a
        server adds it to the hole's target length before it picks the smallest of `canvas_lengths` that holds it."""
        ...

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
    """A loaded model that fills infill canvases: every member the server uses, and nothing else (a static type
    check, `make typecheck`, holds every implementer to these signatures). Blocking calls (`infill`) run on the
    engine thread; the other members may be called from the event loop."""

    @property
    def name(self) -> str:
        """What dg/status calls the model: the checkpoint's name, and where a remote one runs."""
        ...

    @property
    def prompt_format(self) -> PromptFormat: ...

    @property
    def splits_before_newline(self) -> bool:
        """Whether `encode(a + b) == encode(a) + encode(b)` when `b` starts with a newline after non-whitespace
        (lets the server re-tokenize only the cursor's line of a prompt)."""
        ...

    def encode(self, text: str) -> list[int]: ...

    def new_cancel_token(self) -> CancelFlag: ...

    def infill(self, context_ids: list[int], *, canvas_length: int, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, on_step: Callable[[StepDraft], None] | None = None,
               draft_text: bool = False, init_ids: list[int] | None = None, start_noise: float = 1.0) -> FillResult:
        """Fill up to `max_canvases` canvases of `canvas_length` after `context_ids` (`steps`, `entropy_bound`:
        None = the checkpoint's; `seed` picks the noise); stops within one step of `cancel.cancel()`. `on_step`
        gets a `StepDraft` after every denoising step where the backend sees steps (the embedded engine, the engine
        service; an OpenAI-compatible server streams no steps: never called), its text only with `draft_text`.
        `init_ids` seeds the canvas (a rewrite starting from the code instead of from noise), each position
        replaced by a uniform random id with probability `start_noise` (1: from noise, the seed unused; 0: the
        seed as is); a backend that cannot seed fills from noise. A failure of the backend is an `error` result
        (see FillResult); raises only on invalid arguments or a broken local engine."""
        ...

    def settings_in_force(self) -> SettingsInForce:
        """The settings a fill runs with, for `dg/status`, `dg-lsp --check` and the confidence gate (which reads
        "min_confidence"): see `SettingsInForce`. A remote backend reports what it knows; a setting only its server
        knows has source "server"."""
        ...

    def watch_state(self, listener: StateListener) -> None:
        """Call `listener(state, message)` from any thread whenever the backend turns "error" (its server went away)
        or "ready" again; a backend whose state cannot change (the embedded engine) never calls it."""
        ...

    def close(self) -> None:
        """Release what the backend holds (connections, threads); the server calls it on the backend a reload
        replaced and never uses that one again."""
        ...
