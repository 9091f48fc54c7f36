"""A stand-in for vLLM's OpenAI-compatible server (`vllm serve`), answering in the shapes vLLM documents and
recording what it was sent. `mode` picks the next answers: "ok", "error-body" (HTTP 400 with an error object),
"500" (HTTP 500 with a plain-text body, as a proxy in front of a server sends), "error-event" (an error in the
middle of a stream), "drop" (the connection closes mid-stream), "hang" (nothing, until the client hangs up)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

MODEL = "google/diffusiongemma-26B-A4B-it"
CANVASES = ["return width", " * height"]  # one streamed piece per committed canvas


class FakeVLLM:
    def __init__(self) -> None:
        self.mode = "ok"
        self.answer = CANVASES
        self.finish = "stop"  # the last event's finish_reason ("length": the last canvas reached no end token)
        self.owned_by = "vllm"  # what /v1/models says (vLLM's ModelCard default)
        self.models_up = True
        self.requests: list[tuple[str, dict, dict]] = []  # (path, body, headers)
        self.hung_up = threading.Event()
        app = Starlette(routes=[Route("/v1/models", self._models),
                                Route("/version", lambda request: JSONResponse({"version": "0.33.0"})),
                                Route("/v1/completions", self._fill, methods=["POST"]),
                                Route("/v1/chat/completions", self._fill, methods=["POST"])])
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> FakeVLLM:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("the fake server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    async def _models(self, request: Request):
        if not self.models_up:
            return JSONResponse({"error": {"message": "starting", "type": "ServiceUnavailableError", "param": None,
                                           "code": 503}}, 503)
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 1,
                                                         "owned_by": self.owned_by, "root": MODEL, "parent": None,
                                                         "max_model_len": 32768}]})

    async def _fill(self, request: Request):
        body = await request.json()
        chat = request.url.path.endswith("/chat/completions")
        self.requests.append((request.url.path, body, dict(request.headers)))
        if self.mode == "error-body":
            return JSONResponse({"error": {"message": "This model's maximum context length is 32768 tokens.",
                                           "type": "BadRequestError", "param": None, "code": 400}}, 400)
        if self.mode == "500":
            return PlainTextResponse("Internal Server Error", 500)
        return StreamingResponse(self._events(chat), media_type="text/event-stream")

    async def _events(self, chat: bool):
        if self.mode == "hang":
            try:
                await asyncio.sleep(3600)
            finally:
                self.hung_up.set()
        kind = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": "cmpl-1", "object": kind, "created": 1, "model": MODEL}

        def chunk(text: str | None, finish: str | None = None, first: bool = False) -> str:
            if chat:
                delta = {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish,
                          "stop_reason": None}
            return f"data: {json.dumps({**head, 'choices': [choice]})}\n\n"

        if chat:
            yield chunk("", first=True)
        for i, piece in enumerate(self.answer):
            yield chunk(piece)
            if i == 0 and self.mode == "error-event":
                err = {"error": {"message": "engine dead", "type": "InternalServerError", "param": None, "code": 500}}
                yield f"data: {json.dumps(err)}\n\n"
                yield "data: [DONE]\n\n"
                return
            if i == 0 and self.mode == "drop":
                raise ConnectionResetError("the fake drops the connection")
        yield chunk(None, self.finish)
        yield "data: [DONE]\n\n"
