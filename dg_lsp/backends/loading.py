"""Getting a backend ready: the embedded engine's loader, and the checks before the server says "ready".

A model is "ready" only once it has loaded AND a check fill (one short canvas through the engine seam) has run
(`check_fill`, for any backend). What a checkpoint of the embedded engine lacks or gets wrong (no tokenizer,
damaged weights, canvas lengths the model cannot hold) is found first (`check_engine`); each failure is a
ModelCheckError whose message says what to do, which the server shows as its "error" status.

This module is where dg_lsp meets a concrete engine; everything else in dg_lsp sees `engine.seam.InfillBackend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dg_lsp.config import Settings
from engine.seam import CancelFlag, InfillBackend

if TYPE_CHECKING:
    from engine.base import BaseEngine

CHECK_PREFIX, CHECK_SUFFIX = "def add(a, b):\n    return ", "\n"
CHECK_STEPS = 2
CHECK_FILL_S = 120.0  # the check fill (one short canvas, two steps) is cancelled after this long


class ModelCheckError(RuntimeError):
    """A checkpoint the server cannot serve from; the message says why and what to do."""


class EndpointDown(ModelCheckError, ConnectionError):
    """A remote backend's server that does not answer; the message names it and says what to do."""

    def __init__(self, what: str, endpoint: object, exc: BaseException, hint: str) -> None:
        super().__init__(f"{what} at {endpoint} is down or not answering ({transport_reason(exc)}); {hint}")


def transport_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words ("connection refused", "no answer within 10 s")."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    text = str(exc) or type(exc).__name__
    if text.startswith("[Errno") and "] " in text:  # "[Errno 111] Connection refused"
        text = text.split("] ", 1)[1]
    return text[:1].lower() + text[1:]


def load_engine(settings: Settings) -> InfillBackend:
    """The embedded backend: `engine.engine.Engine` in this process (imported here so `dg-lsp --version` does not
    import torch, nor a server on a remote backend), checked by `check_engine`. Runs on the engine thread.

    On CPU the engine gets one intra-op thread: a small code model's matrices are too small to gain from more,
    and extra threads fight the editor and this server's event loop for the cores."""
    import torch

    from engine.engine import Engine

    if settings.device == "cpu" or (settings.device == "auto" and not torch.cuda.is_available()):
        torch.set_num_threads(1)
    from engine.loader import refused

    try:
        engine = Engine.from_pretrained(settings.model_path, device=settings.device, dtype=settings.dtype,
                                        prompt_format=settings.prompt_format, weights=settings.weights)
    except (ValueError, FileNotFoundError) as exc:  # refused by name (engine.formats, engine.loader): one line
        if refused(exc):
            raise ModelCheckError(str(exc)) from None
        raise
    check_engine(engine)
    return engine


def check_engine(engine: BaseEngine) -> None:
    """What the embedded engine needs before it can serve, each failure a ModelCheckError that says what to do:
    a tokenizer, canvases the model can hold, weights and logits that are finite. (Before the check fill: a canvas
    of 200,000 tokens would not finish, and damaged weights give NaN logits, which decode to empty fills.)"""
    import torch

    path = engine.path
    if engine.tokenizer is None:
        raise ModelCheckError(f"{path.name} has no tokenizer.json: the server reads code through the checkpoint's "
                              f"tokenizer; put the tokenizer.json that came with the checkpoint into {path.name}/")
    fmt, limit = engine.prompt_format, engine.config.text.max_position_embeddings
    longest, context = max(fmt.canvas_lengths), fmt.max_context_tokens or 0
    if longest + context + 4 > limit:
        raise ModelCheckError(
            f"{path.name}/infill.json: canvas_lengths go up to {longest} tokens (with a context of up to {context}), "
            f"more than the model's {limit} positions (max_position_embeddings in config.json); list the canvas "
            f"lengths the model was trained with (infill.json's canvas_lengths)")
    bad = [name for name, p in engine.model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise ModelCheckError(f"{path.name}: {len(bad)} weight tensor(s) hold NaN or infinite values (the first: "
                              f"{bad[0]}); the weights file is damaged: export or download it again")
    ids = engine.prompt_format.context(engine.encode(CHECK_PREFIX), engine.encode(CHECK_SUFFIX))
    logits = engine.check_logits(ids, min(fmt.canvas_lengths))  # (1, C, V)
    if not bool(torch.isfinite(logits).all()):
        raise ModelCheckError(f"{path.name}: the model's logits on a test prompt are not finite (NaN or infinite): "
                              f"the weights are damaged or do not fit the dtype {engine.dtype}; try dtype float32 "
                              f"or export the checkpoint again")


def check_fill(backend: InfillBackend, cancel: CancelFlag) -> None:
    """Engine thread: one short fill through the engine seam (`prompt_format`, `encode`, `infill`), for every kind
    of backend, so "ready" means a fill has run. Raises ModelCheckError when it cannot."""
    try:
        fmt = backend.prompt_format
        ids = fmt.context(backend.encode(CHECK_PREFIX), backend.encode(CHECK_SUFFIX))
        res = backend.infill(ids, canvas_length=min(fmt.canvas_lengths), steps=CHECK_STEPS, seed=0, cancel=cancel)
    except Exception as exc:  # noqa: BLE001 -- any failure of the check is the checkpoint's
        raise ModelCheckError(f"the check fill failed: {type(exc).__name__}: {exc}") from exc
    if res.error is not None:
        raise ModelCheckError(f"the check fill failed: {res.error}")
    if res.cancelled:
        raise ModelCheckError(f"the check fill (one canvas of {min(fmt.canvas_lengths)} tokens, {CHECK_STEPS} "
                              f"steps) did not finish within {CHECK_FILL_S:.0f} s")
    if not isinstance(res.text, str):
        raise ModelCheckError(f"the check fill returned {type(res.text).__name__}, not text")
