"""The `openai` backend against vLLM 0.33's own models (`make vllm-contract`; skipped where vLLM is not installed).

A stand-in server parses every body the backend sends with vLLM's request classes and runs the checks vLLM runs on
them for a diffusion model (`to_sampling_params`, `SamplingParams._validate_diffusion`,
`validate_diffusion_sampling_params` against a served canvas of 256), answering vLLM's own error response when one
fails; it answers with vLLM's response classes (`ModelList`, `CompletionStreamResponse`,
`ChatCompletionStreamResponse`, `ErrorResponse`). Every body: FIM and chat checkpoints, vLLM detected or not, each
canvas length the checkpoint has, one and two canvases, the checkpoint's steps and a setting, and seeded fills.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from http import HTTPStatus
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="make vllm-contract installs vLLM 0.33.0 (without its dependencies)")

import uvicorn  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402
from vllm import __version__ as VLLM_VERSION  # noqa: E402
from vllm.entrypoints.generate.base.protocol import DeltaMessage  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import (  # noqa: E402
    ChatCompletionRequest,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
)
from vllm.entrypoints.openai.completion.protocol import (  # noqa: E402
    CompletionRequest,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
)
from vllm.entrypoints.serve.engine.protocol import ModelCard, ModelList  # noqa: E402
from vllm.entrypoints.serve.exception_handling.error_response import create_error_response  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.utils.diffusion import validate_diffusion_sampling_params  # noqa: E402

from dg_lsp.config import Settings  # noqa: E402

MODEL, SERVED_CANVAS, VOCAB = "google/diffusiongemma-26B-A4B-it", 256, 262_144
PIECES = ["return width", " * height"]  # one streamed piece per committed canvas
PREFIX, SUFFIX = "def area(width, height):\n    ", "\n\n\nprint(area(2, 3))\n"


def fields(cls) -> set[str]:
    return set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}


class VLLMShaped:
    """vLLM's OpenAI server as far as dg-lsp meets it, built from vLLM's own classes. `finish` is the last event's
    finish_reason; `error_event` puts vLLM's streaming error after the first piece. `checked` records, per request,
    the body, the fields vLLM would ignore, and the SamplingParams vLLM built from it."""

    def __init__(self) -> None:
        self.finish, self.error_event = "stop", False
        self.checked: list[dict] = []
        app = Starlette(routes=[Route("/v1/models", self._models), Route("/version", self._version),
                                Route("/v1/completions", self._fill, methods=["POST"]),
                                Route("/v1/chat/completions", self._fill, methods=["POST"])])
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> VLLMShaped:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    async def _models(self, request: Request):
        return JSONResponse(ModelList(data=[ModelCard(id=MODEL, root=MODEL, max_model_len=32768)]).model_dump())

    async def _version(self, request: Request):
        return JSONResponse({"version": VLLM_VERSION})

    async def _fill(self, request: Request):
        body = await request.json()
        chat = request.url.path.endswith("/chat/completions")
        cls = ChatCompletionRequest if chat else CompletionRequest
        try:
            req = cls.model_validate(body)
            limit = (req.max_completion_tokens or req.max_tokens) if chat else req.max_tokens
            params = req.to_sampling_params(limit, {})
            params._validate_diffusion(SimpleNamespace(is_diffusion=True))  # what SamplingParams.verify runs
            validate_diffusion_sampling_params(params, canvas_length=SERVED_CANVAS, vocab_size=VOCAB)
        except (ValueError, VLLMValidationError) as exc:  # pydantic's ValidationError is a ValueError
            err = create_error_response(exc)
            return JSONResponse(err.model_dump(), status_code=err.error.code)
        self.checked.append({"path": request.url.path, "body": body, "ignored": set(body) - fields(cls),
                             "params": params})
        return StreamingResponse(self._events(chat), media_type="text/event-stream")

    async def _events(self, chat: bool):
        def event(text: str | None, finish: str | None = None) -> str:
            if chat:
                choice = ChatCompletionResponseStreamChoice(index=0, delta=DeltaMessage(content=text),
                                                            finish_reason=finish)
                chunk = ChatCompletionStreamResponse(model=MODEL, choices=[choice])
            else:
                chunk = CompletionStreamResponse(model=MODEL, choices=[
                    CompletionResponseStreamChoice(index=0, text=text or "", finish_reason=finish)])
            return f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n"

        for i, piece in enumerate(PIECES):
            yield event(piece)
            if i == 0 and self.error_event:  # as vLLM's create_streaming_error_response writes it
                err = create_error_response("engine dead", "InternalServerError", HTTPStatus.INTERNAL_SERVER_ERROR)
                yield f"data: {json.dumps(err.model_dump())}\n\n"
                yield "data: [DONE]\n\n"
                return
        yield event("" if chat else None, self.finish)
        yield "data: [DONE]\n\n"


@pytest.fixture(scope="module")
def vllm_server():
    with VLLMShaped() as server:
        yield server


def backend(connect, server: VLLMShaped, **kw):
    return connect(dataclasses.replace(Settings(backend="openai", endpoint=server.url), **kw))


def hole_context(b, chat: bool) -> list[int]:
    from engine.seam import HoleInfo

    hole = HoleInfo(kind="statement", language="python", filename="geometry.py") if chat else None
    return b.prompt_format.context(b.encode(PREFIX), b.encode(SUFFIX), hole)


@pytest.mark.parametrize("chat", [False, True], ids=["fim", "chat"])
@pytest.mark.parametrize("diffusion", ["auto", "off"])
def test_every_body_the_backend_sends_passes_vllms_own_checks(vllm_server, connect, chat_checkpoint, chat, diffusion):
    kw = {"model_path": str(chat_checkpoint), "prompt_format": "chat"} if chat else {}
    b = backend(connect, vllm_server, openai_diffusion=diffusion, **kw)
    assert b.diffusion is (diffusion == "auto") and b.server == f"vLLM {VLLM_VERSION}"
    ids = hole_context(b, chat)
    for canvas in b.prompt_format.canvas_lengths:
        for canvases in (1, 2):
            for steps in (None, 6):
                before = len(vllm_server.checked)
                res = b.infill(ids, canvas_length=canvas, max_canvases=canvases, steps=steps)
                assert res.error is None and res.text == "".join(PIECES)
                assert len(vllm_server.checked) == before + 1
                seen = vllm_server.checked[-1]
                assert seen["ignored"] == set(), f"vLLM would ignore {seen['ignored']}"
                params = seen["params"]
                assert params.max_tokens == canvas * canvases and params.seed is None and params.temperature == 1.0
                if b.diffusion:
                    assert params.extra_args == {"diffusion_canvas_length": canvas,
                                                 "diffusion_max_steps": steps or b.local.default_steps}
                else:
                    assert not params.extra_args
                assert seen["path"] == ("/v1/chat/completions" if chat else "/v1/completions")


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_seeded_bodies_pass_vllms_own_checks(vllm_server, connect, noise):
    b = backend(connect, vllm_server)
    ids, init = hole_context(b, False), b.encode("return width * height")
    for canvas in b.prompt_format.canvas_lengths:
        res = b.infill(ids, canvas_length=canvas, init_ids=init, start_noise=noise, seed=5)
        assert res.error is None and res.text == "".join(PIECES)
        extra = vllm_server.checked[-1]["params"].extra_args
        assert len(extra["diffusion_seed_canvas"]) == canvas and extra["diffusion_pinned"] == []
        laid_out = init + [b.local.eos_id] + [b.local.pad_id] * (canvas - len(init) - 1)
        assert (extra["diffusion_seed_canvas"] == laid_out) is (noise == 0)


def test_vllms_own_refusal_reaches_the_fill_as_an_error(vllm_server, connect):
    b = backend(connect, vllm_server)
    res = b.infill(hole_context(b, False), canvas_length=SERVED_CANVAS * 2)  # wider than the served canvas
    assert res.text == "" and not res.cancelled
    assert "HTTP 400" in res.error and "no larger than the served canvas" in res.error


def test_vllms_finish_reasons_and_error_events_are_read(vllm_server, connect):
    b = backend(connect, vllm_server)
    ids = hole_context(b, False)
    try:
        vllm_server.finish = "length"
        res = b.infill(ids, canvas_length=16)
        assert res.text == "".join(PIECES) and res.finish_reason == "length" and res.error is None
        vllm_server.error_event = True
        res = b.infill(ids, canvas_length=16)
        assert res.text == "" and not res.cancelled and res.error.endswith("failed: engine dead")
    finally:
        vllm_server.finish, vllm_server.error_event = "stop", False
