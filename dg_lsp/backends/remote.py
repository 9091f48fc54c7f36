"""What the remote backends share: a private event loop for their HTTP calls, cancellable from the engine thread,
server-sent-event parsing, result types, and a state (ready/error) that listeners hear about.

`infill` runs on the server's engine thread and blocks there, as the embedded engine does. The HTTP request
itself runs on the backend's own asyncio loop (httpx.AsyncClient); the engine thread waits for its events in
slices of `POLL_S` and checks the cancel flag between them, so a cancel closes the request (and with it the
remote canvas) within milliseconds, whatever the server is doing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

from dg_lsp.backends.checkpoint import LocalCheckpoint
from engine.seam import CancelFlag, CancelToken, PromptFormat, StateListener

log = logging.getLogger(__name__)

POLL_S = 0.005


@dataclass
class RemoteResult:
    """engine.seam.FillResult of a remote fill: a text, a cancel (the caller's flag closed the request), or a
    failure (`error`: the server's error, a refused or dropped connection; `text` "" and `cancelled` False)."""

    text: str
    steps: int = 0
    cancelled: bool = False
    reused_prefix_tokens: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    confidence: float | None = None  # the engine service's; None from an OpenAI-compatible server (unknown)
    finish_reason: str | None = None  # an OpenAI stream's ("length": the last canvas did not reach an end token)

    @classmethod
    def failed(cls, error: str, steps: int = 0) -> RemoteResult:
        return cls("", steps=steps, error=error)


@dataclass
class RemoteDraft:
    """engine.seam.StepDraft of a remote denoising step."""

    step: int
    steps: int
    text: str
    canvas: int = 0


class RemoteError(Exception):
    """The server answered with an error (an HTTP status with an error body, or an error event in a stream)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def error_message(obj: Any) -> str | None:
    """The message of an OpenAI-style error body: `{"error": {"message": ...}}`, or vLLM's older flat
    `{"object": "error", "message": ...}`; None when `obj` is not an error."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    if isinstance(err, str):
        return err
    if obj.get("object") == "error":
        return str(obj.get("message") or "error")
    return None


async def raise_for_error(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    raw = await resp.aread()
    try:
        msg = error_message(json.loads(raw))
    except ValueError:
        msg = None
    raise RemoteError(f"HTTP {resp.status_code}: {msg or raw[:200].decode(errors='replace')}", resp.status_code)


async def sse_data(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a server-sent-event stream's `data:` lines, up to `[DONE]`; error events raise."""
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue  # blank separators, `:` comments, event names
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            obj = json.loads(data)
        except ValueError:
            raise RemoteError(f"the server sent a malformed event: {data[:120]!r}") from None
        msg = error_message(obj)
        if msg is not None:
            code = obj["error"].get("code") if isinstance(obj.get("error"), dict) else obj.get("code")
            raise RemoteError(msg, code if isinstance(code, int) else None)
        yield obj


class LoopThread:
    """A private asyncio loop on a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run `coro` on the loop and wait for its value (setup calls)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, make: Callable[[Callable[[Any], None]], Coroutine[Any, Any, Any]], cancel: CancelFlag | None = None,
             abort: Callable[[], bool] = lambda: False, on_event: Callable[[Any], None] | None = None) -> Any:
        """Run `make(put)` on the loop; what it `put`s reaches `on_event` on this thread, in order. Returns its
        value, or None when `cancel` or `abort()` fired first: the call is then cancelled, which
        closes its HTTP request."""
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        fut = asyncio.run_coroutine_threadsafe(make(events.put), self.loop)
        while True:
            if (cancel is not None and cancel.cancelled) or abort():
                fut.cancel()
                return None
            try:
                item = events.get(timeout=POLL_S)
            except queue.Empty:
                if fut.done():
                    while on_event is not None and not events.empty():  # put after the last poll, before the end
                        on_event(events.get())
                    return fut.result()
                continue
            if on_event is not None:
                on_event(item)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class RemoteState:
    """ready | error, with a message; listeners hear every change (from whichever thread made it)."""

    def __init__(self) -> None:
        self.state, self.message = "ready", ""
        self._listeners: list[StateListener] = []
        self._lock = threading.Lock()

    def watch_state(self, listener: StateListener) -> None:
        """Call `listener(state, message)` whenever the backend's state changes (dg/status follows it)."""
        with self._lock:
            self._listeners.append(listener)

    def set_state(self, state: str, message: str) -> None:
        with self._lock:
            if (state, message) == (self.state, self.message):
                return
            changed = state != self.state
            self.state, self.message = state, message
            listeners = list(self._listeners)
        if changed:
            (log.warning if state == "error" else log.info)("backend %s: %s", state, message)
            for fn in listeners:
                try:
                    fn(state, message)
                except Exception:  # noqa: BLE001 -- a listener's failure must not stop the backend
                    log.exception("state listener failed")

    @property
    def ready(self) -> bool:
        return self.state == "ready"


class LocalSide:
    """What a remote backend answers from this process (engine.seam.InfillBackend): tokenization and the prompt
    format from `local`, the checkpoint's tokenizer (dg_lsp.backends.checkpoint), cancel flags, and `status`
    listeners."""

    local: LocalCheckpoint
    status: RemoteState

    @property
    def prompt_format(self) -> PromptFormat:
        return self.local.prompt_format

    @property
    def splits_before_newline(self) -> bool:
        return self.local.splits_before_newline

    def encode(self, text: str) -> list[int]:
        return self.local.encode(text)

    def new_cancel_token(self) -> CancelToken:
        return CancelToken()

    def watch_state(self, listener: StateListener) -> None:
        self.status.watch_state(listener)
