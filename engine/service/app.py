"""The service's HTTP app (starlette): health, models, checkpoint files, completions and chat completions.

Every request passes `Guard` first: with an API key, a request without `Authorization: Bearer <key>` (the scheme
in any case, RFC 9110) gets 401 before its body is read, so it is never queued. Bodies are read up to the size
limit on the event loop; parsing, checking, chat-template rendering and tokenizing (engine.service.requests), and
building the final answer, run in a worker thread, so a 1 MiB prompt (seconds of tokenizing) never holds up
`/health` or other clients. A streamed request whose client goes away is cancelled, and so is a plain one (a
watcher waits for the disconnect while the job runs), so the engine stops within one step.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.prompts.template import ChatTemplate
from engine.service.chat import ChatUnavailable, chat_template, render
from engine.service.requests import (
    BadRequest,
    Limits,
    ModelInfo,
    Parsed,
    chat_body,
    completion_body,
    error_body,
    new_id,
    parse_chat,
    parse_completion,
)
from engine.service.scheduler import Job, QueueFull, Scheduler
from engine.service.stop import cut, visible

log = logging.getLogger(__name__)

# The small files a client needs to tokenize and lay out prompts as the service does (never the weights).
CHECKPOINT_FILES = ("config.json", "generation_config.json", "infill.json", "tokenizer.json", "tokenizer_config.json",
                    "chat_template.jinja", "chat_template.json", "special_tokens_map.json")


def client_files(backend: Any, path: Path) -> dict[str, bytes]:
    """CHECKPOINT_FILES the service hands out: a checkpoint directory's own; for a GGUF file, those beside it, with
    config.json / generation_config.json written from the config it was loaded with (engine.formats.hf_files), the
    tokenizer rebuilt from its metadata when none is beside it, and its `tokenizer.chat_template` when no template
    file is beside it; a mask-diffusion family's GGUF gets `family_client_config` as its config.json."""
    from engine.formats import gguf
    from engine.formats.hf_files import config_json, generation_config_json
    from engine.prompts.template import find_chat_template

    side = gguf.tokenizer_dir(path)
    out = {name: (side / name).read_bytes() for name in CHECKPOINT_FILES if (side / name).is_file()}
    if not gguf.is_gguf(path):
        return out
    tokenizer = getattr(backend, "tokenizer", None)
    if "tokenizer.json" not in out and tokenizer is not None:
        out["tokenizer.json"] = tokenizer.to_str().encode()
    family = getattr(getattr(backend, "family", None), "name", None)  # a mask-diffusion family's GGUF (MaskEngine)
    if family is not None:  # its numbers; no chat template (mask infill only)
        out["config.json"] = family_client_config(backend, family)
        out.pop("generation_config.json", None)
        return out
    out["config.json"], out["generation_config.json"] = config_json(backend.config), generation_config_json(
        backend.config)
    # the engine's rule (engine.prompts): a template file beside the checkpoint wins, else the file's own
    if find_chat_template(side) is None and (template := gguf.file_prompt(path, tokenizer=False)[1]):
        out["chat_template.jinja"] = template.encode()
    return out


def family_client_config(backend: Any, family: str) -> bytes:
    """config.json for the clients of a mask-diffusion family's GGUF (no config.json of its own): not a checkpoint
    config, the numbers dg_lsp.backends.checkpoint.load_local lays prompts out with (key "dg_family")."""
    text, fmt = backend.config.text, backend.prompt_format
    steps = getattr(backend.config.sampler, "steps", None)
    raw = {"dg_family": family, "vocab_size": int(backend.vocab_size), "mask_token_id": text.mask_token_id,
           "pad_token_id": text.pad_token_id, "bos_id": fmt.bos_id, "eos_token_id": list(backend.config.eos_token_ids),
           "canvas_lengths": list(fmt.canvas_lengths), "steps": steps}
    return json.dumps(raw, indent=1).encode()


@dataclass
class ServiceState:
    """The loaded model (once `attach`ed), the scheduler and the service's settings."""

    limits: Limits = field(default_factory=Limits)
    api_key: str | None = None
    served_name: str | None = None
    model_path: Path | None = None
    state: str = "loading"  # loading | ready | error
    error: str | None = None
    model_loads: int = 0
    backend: Any = None
    info: ModelInfo | None = None
    chat: ChatTemplate | None = None
    chat_error: str = "the model is not loaded"
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    file_data: dict[str, bytes] = field(default_factory=dict)
    checkpoint_id: str | None = None
    scheduler: Scheduler = field(default_factory=Scheduler)
    started: float = field(default_factory=time.time)
    last_request: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.served_name or (self.model_path.name if self.model_path else "dg-engine")

    def attach(self, backend: Any, path: Path) -> None:
        """Serve `backend` (loaded from `path`); called once, from the loading thread."""
        self.model_path, self.backend = path, backend
        fmt = backend.prompt_format
        lengths = tuple(sorted(fmt.canvas_lengths))
        config = getattr(backend, "config", None)
        self.info = ModelInfo(
            name=self.name, vocab_size=int(backend.vocab_size), canvas_lengths=lengths,
            default_canvas=int(getattr(config, "canvas_length", lengths[-1])), encode=backend.encode,
            bos_id=getattr(fmt, "bos_id", None), fim=fmt.context if fmt.name == "fim" else None)
        self.file_data = client_files(backend, path)
        for name, data in self.file_data.items():
            self.files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        self.checkpoint_id = hashlib.sha256(json.dumps(self.files, sort_keys=True).encode()).hexdigest()[:16]
        try:
            self.chat = chat_template(backend, path)
        except ChatUnavailable as exc:
            self.chat, self.chat_error = None, str(exc)
        except Exception as exc:  # noqa: BLE001 -- a broken template: completions are still served
            self.chat, self.chat_error = None, f"the chat template cannot be used: {exc}"
        self.scheduler.max_queue = self.limits.max_queue
        self.scheduler.start(backend)
        self.model_loads += 1
        self.state = "ready"

    def fail(self, message: str) -> None:
        self.state, self.error = "error", message

    def health(self) -> dict[str, Any]:
        return {"model": self.name, "path": str(self.model_path) if self.model_path else None, "state": self.state,
                "error": self.error, "model_loads": self.model_loads, **self.scheduler.stats(), "pid": os.getpid(),
                "checkpoint": self.checkpoint_id, "uptime_s": round(time.time() - self.started, 1)}


class Guard:
    """ASGI middleware: counts activity (for --idle-exit) and refuses requests without the API key."""

    def __init__(self, app: ASGIApp, state: ServiceState) -> None:
        self.app, self.state = app, state
        self._want = state.api_key.encode() if state.api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.state.last_request = time.monotonic()
            if self._want is not None:
                got = dict(scope.get("headers") or []).get(b"authorization", b"")
                if not secrets.compare_digest(bearer_token(got), self._want):
                    body = error_body("a valid API key is required: send Authorization: Bearer <key>", 401)
                    await JSONResponse(body, 401, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def bearer_token(header: bytes) -> bytes:
    """The credentials of an `Authorization: Bearer <token>` header, b"" for any other scheme. The scheme is
    case-insensitive and may be followed by several spaces (RFC 9110 section 11.4)."""
    scheme, _, token = header.strip(b" \t").partition(b" ")
    return token.lstrip(b" ") if scheme.lower() == b"bearer" else b""


def create_app(state: ServiceState) -> Starlette:
    async def health(request: Request) -> Response:
        return JSONResponse(state.health())

    async def models(request: Request) -> Response:
        if state.state != "ready":
            return _unavailable(state)
        return JSONResponse({"object": "list", "data": [{
            "id": state.name, "object": "model", "created": int(state.started), "owned_by": "dg-lsp",
            "root": str(state.model_path), "max_model_len": state.limits.max_prompt_tokens}]})

    async def checkpoint(request: Request) -> Response:
        if state.state != "ready":
            return _unavailable(state)
        b = state.backend
        return JSONResponse({"model": state.name, "id": state.checkpoint_id, "files": state.files,
                             "prompt_format": b.prompt_format.name, "drafts": True,
                             "splits_before_newline": bool(b.splits_before_newline),
                             "settings_in_force": b.settings_in_force()})

    async def checkpoint_file(request: Request) -> Response:
        name = request.path_params["name"]
        if state.state != "ready" or name not in state.files:
            return JSONResponse(error_body(f"no checkpoint file {name!r} (see GET /v1/dg/checkpoint)", 404), 404)
        return Response(state.file_data[name], media_type="application/octet-stream")

    async def completions(request: Request) -> Response:
        return await _fill(request, state, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await _fill(request, state, chat=True)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        return JSONResponse(error_body(str(getattr(exc, "detail", "")) or "error", status), status)

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path, exc_info=exc)
        return JSONResponse(error_body(f"internal error: {type(exc).__name__}", 500), 500)

    routes = [
        Route("/health", health), Route("/v1/models", models), Route("/v1/dg/checkpoint", checkpoint),
        Route("/v1/dg/checkpoint/{name}", checkpoint_file),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})
    app.add_middleware(Guard, state=state)
    return app


def _unavailable(state: ServiceState) -> Response:
    why = f"the model failed to load: {state.error}" if state.state == "error" else "the model is still loading"
    return JSONResponse(error_body(why, 503), 503)


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise BadRequest(f"the body must be at most {limit} bytes (Content-Length {length})", status=413)
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise BadRequest(f"the body must be at most {limit} bytes", status=413)
    return bytes(buf)


def _parse(raw: bytes, state: ServiceState, chat: bool) -> Parsed:
    """A body -> a checked request with its prompt tokenized (a worker thread: time grows with the body)."""
    try:
        body = json.loads(raw, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not chat:
        return parse_completion(body, state.info, state.limits)
    if state.chat is None:
        raise BadRequest(state.chat_error)
    template = state.chat
    try:
        return parse_chat(body, state.info, state.limits, lambda m, kw, gen: render(template, m, kw, gen))
    except ValueError as exc:  # the chat template refused the messages
        raise BadRequest(str(exc), "messages") from None


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def _fill(request: Request, state: ServiceState, chat: bool) -> Response:
    if state.state != "ready":
        return _unavailable(state)
    try:
        raw = await _read_body(request, state.limits.max_body_bytes)
        parsed = await asyncio.to_thread(_parse, raw, state, chat)
    except BadRequest as exc:
        return JSONResponse(error_body(exc.message, exc.status, exc.param), exc.status)
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def emit(kind: str, payload: Any) -> None:  # engine thread -> this request's loop
        loop.call_soon_threadsafe(events.put_nowait, (kind, payload))

    client = parsed.client or f"anonymous-{new_id('c')}"
    try:
        job = state.scheduler.submit(client, parsed.inputs, emit, parsed.step_events)
    except QueueFull as exc:
        return JSONResponse(error_body(str(exc), 429), 429)
    reply = _Reply(state, parsed, chat, new_id("chatcmpl" if chat else "cmpl"))
    if parsed.stream:
        return StreamingResponse(_stream(state, job, events, reply), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    kind, payload = await _terminal(request, state, job, events)
    if kind == "done":
        return JSONResponse(await asyncio.to_thread(reply.final, payload, False))
    status = {"cancelled": 409, "gone": 499}.get(kind, 500)
    return JSONResponse(error_body(f"cancelled: {payload}" if kind == "cancelled" else str(payload), status), status)


async def _terminal(request: Request, state: ServiceState, job: Job,
                    events: asyncio.Queue) -> tuple[str, Any]:
    """Wait for the job's outcome; cancel it if the client disconnects first."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    gone = asyncio.ensure_future(disconnected())
    try:
        while True:
            getter = asyncio.ensure_future(events.get())
            await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                kind, payload = getter.result()
                if kind != "step":
                    return kind, payload
            else:
                getter.cancel()
                state.scheduler.cancel(job, "the client went away")
                return "gone", "the client went away"
    finally:
        gone.cancel()


async def _stream(state: ServiceState, job: Job, events: asyncio.Queue, reply: _Reply) -> AsyncIterator[str]:
    """Server-sent events: (chat: a role delta,) a draft event per step when asked, the final text, [DONE]."""
    try:
        if reply.chat:
            yield _sse(chat_body(reply.rid, state.name, "", None, chunk=True, first=True))
        while True:
            kind, payload = await events.get()
            if kind == "step":
                yield _sse(reply.draft(payload))
                continue
            if kind == "done":
                yield _sse(await asyncio.to_thread(reply.final, payload, True))
            else:
                status = 409 if kind == "cancelled" else 500
                yield _sse(error_body(f"cancelled: {payload}" if kind == "cancelled" else str(payload), status))
            yield "data: [DONE]\n\n"
            return
    finally:  # also when starlette cancels the stream because the client disconnected
        state.scheduler.cancel(job, "the client went away")


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


@dataclass
class _Reply:
    """Builds one request's response bodies."""

    state: ServiceState
    parsed: Parsed
    chat: bool
    rid: str

    def _body(self, text: str, finish: str | None, chunk: bool, **extra: Any) -> dict[str, Any]:
        if self.chat:
            return chat_body(self.rid, self.state.name, text, finish, chunk=chunk, **extra)
        return completion_body(self.rid, self.state.name, text, finish, **extra)

    def draft(self, d: Any) -> dict[str, Any]:
        dg = {"draft": visible(d.text, self.parsed.stop), "step": d.step, "steps": d.steps,
              "canvas": getattr(d, "canvas", 0)}
        return self._body("", None, True, dg=dg)

    def final(self, res: Any, chunk: bool) -> dict[str, Any]:
        """The last body: the text cut to max_tokens, then before the first stop string (a worker thread: it may
        decode and tokenize the whole answer)."""
        backend, max_tokens = self.state.backend, self.parsed.max_tokens
        ids = getattr(res, "ids", None)
        text = res.text
        if ids is not None and len(ids) > max_tokens:
            ids = ids[:max_tokens]
            text = backend.decode(ids)
        text, stopped = cut(text, self.parsed.stop)
        if stopped:
            ids = None  # counted again below: the cut text's tokens
        n_out = len(ids) if ids is not None else len(backend.encode(text))
        n_in = len(self.parsed.inputs.context_ids)
        usage = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
        dg = {"steps": res.steps, "reused_prefix_tokens": res.reused_prefix_tokens, "confidence": res.confidence,
              "timings": {k: round(v, 3) for k, v in res.timings.items()}}
        finish = "length" if n_out >= max_tokens and not stopped else "stop"
        return self._body(text, finish, chunk, usage=usage, dg=dg)
