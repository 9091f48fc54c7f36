"""The `openai` backend: against the project's own engine service (FIM through /v1/completions with token ids, chat
through /v1/chat/completions), and against a stand-in answering in the shapes vLLM documents (streamed canvases,
an error body, an error event, a dropped connection, a cancel while it computes)."""

from __future__ import annotations

import dataclasses
import shutil
import signal
import threading

import pytest
from fake_vllm import MODEL, FakeVLLM
from service_harness import private_dir, start_service, wait_until

from dg_lsp.config import Settings
from engine.seam import CancelToken, HoleInfo

PREFIX, SUFFIX = "def area(width, height):\n    ", "\n\n\nprint(area(2, 3))\n"
HOLE = HoleInfo(kind="statement", language="python", filename="geometry.py", lines=1)


def settings(**kw) -> Settings:
    return dataclasses.replace(Settings(backend="openai"), **kw)


@pytest.fixture
def vllm(monkeypatch):
    monkeypatch.setenv("DG_VLLM_KEY", "team-key")
    with FakeVLLM() as fake:
        yield fake


def context(backend, hole: HoleInfo | None = None) -> list[int]:
    return backend.prompt_format.context(backend.encode(PREFIX), backend.encode(SUFFIX), hole)


def test_fim_through_completions_with_token_ids(vllm, connect):
    b = connect(settings(endpoint=vllm.url, api_key_env="DG_VLLM_KEY"))
    assert b.model_name == MODEL and b.prompt_format.name == "fim"
    ids = context(b)
    steps: list[object] = []
    res = b.infill(ids, canvas_length=16, max_canvases=2, on_step=steps.append)
    assert res.text == "return width * height" and not res.cancelled and steps == []
    path, body, headers = vllm.requests[-1]
    assert path == "/v1/completions" and headers["authorization"] == "Bearer team-key"
    assert body == {"model": MODEL, "prompt": ids, "max_tokens": 32, "stream": True,  # vLLM: the hole's canvas
                    "vllm_xargs": {"diffusion_canvas_length": 16, "diffusion_max_steps": 16}}


def test_chat_through_chat_completions_with_thinking_off(vllm, chat_checkpoint, connect):
    vllm.answer = ["```python\nreturn width", " * height\n```"]
    b = connect(settings(endpoint=vllm.url.removesuffix("/v1"), model_path=str(chat_checkpoint),
                               prompt_format="chat", model=MODEL))
    fmt = b.prompt_format
    assert fmt.name == "chat"
    res = b.infill(context(b, HOLE), canvas_length=32)
    path, body, _ = vllm.requests[-1]
    assert path == "/v1/chat/completions"
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["max_completion_tokens"] == 32
    assert "max_tokens" not in body and body["vllm_xargs"]["diffusion_canvas_length"] == 32
    assert body["messages"] == fmt.messages(PREFIX, SUFFIX, HOLE)
    assert "geometry.py" in body["messages"][0]["content"] and PREFIX in body["messages"][0]["content"]
    assert fmt.answer(res.text, PREFIX, SUFFIX) == "return width * height"


def test_a_chat_fill_goes_as_messages_whichever_backend_laid_its_ids_out(vllm, chat_checkpoint, connect):
    """The messages are read from the ids themselves: ids laid out by the backend a reload replaced (or by any
    caller, long ago) still go to /v1/chat/completions; ids that are no chat rendering go as ids."""
    kw = {"endpoint": vllm.url, "model_path": str(chat_checkpoint), "prompt_format": "chat", "model": MODEL}
    before, after = connect(settings(**kw)), connect(settings(**kw))
    ids = context(before, HOLE)
    for _ in range(70):  # more layouts than any side cache would keep
        context(after, dataclasses.replace(HOLE, lines=2))
    after.infill(ids, canvas_length=32)
    path, body, _ = vllm.requests[-1]
    assert path == "/v1/chat/completions" and body["messages"] == after.prompt_format.messages(PREFIX, SUFFIX, HOLE)
    plain = after.encode(PREFIX)
    after.infill(plain, canvas_length=32)
    path, body, _ = vllm.requests[-1]
    assert path == "/v1/completions" and body["prompt"] == plain


def test_an_error_body_answers_empty_and_the_backend_stays_ready(vllm, connect):
    b = connect(settings(endpoint=vllm.url))
    vllm.mode = "error-body"
    res = b.infill(context(b), canvas_length=16)
    assert res.text == "" and "maximum context length" in res.error
    assert b.status.ready
    vllm.mode = "ok"
    assert b.infill(context(b), canvas_length=16).text == "return width * height"


def test_an_error_event_mid_stream_answers_empty(vllm, connect):
    b = connect(settings(endpoint=vllm.url))
    vllm.mode = "error-event"
    res = b.infill(context(b), canvas_length=16)
    assert res.text == "" and not res.cancelled and res.error.endswith("failed: engine dead")


def test_a_dropped_connection_answers_empty_then_the_backend_recovers(vllm, connect):
    b = connect(settings(endpoint=vllm.url))
    states: list[str] = []
    b.watch_state(lambda state, message: states.append(state))
    vllm.mode = "drop"
    res = b.infill(context(b), canvas_length=16)
    assert res.text == "" and not res.cancelled and res.error
    assert states[:1] == ["error"]
    vllm.mode = "ok"
    wait_until(lambda: b.status.ready, 20, "the backend to see the server again")
    assert b.infill(context(b), canvas_length=16).text == "return width * height"


def test_cancelling_closes_the_request(vllm, connect):
    b = connect(settings(endpoint=vllm.url))
    vllm.mode = "hang"
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    res = b.infill(context(b), canvas_length=16, cancel=token)
    assert res.cancelled and res.text == "" and res.error is None
    assert vllm.hung_up.wait(10), "the server never saw the request closed"


def test_fills_holes_against_the_projects_own_service(service, connect):
    remote = connect(settings(endpoint=service.endpoint))
    through_service = connect(Settings(backend="service", endpoint=service.endpoint, auto_start=False))
    assert remote.model_name == "default_model"
    ids = context(remote)
    assert ids == context(through_service)
    res = remote.infill(ids, canvas_length=16)
    assert not res.cancelled and res.error is None
    assert res.text == through_service.infill(ids, canvas_length=16).text


def test_chat_fills_against_the_projects_own_service(chat_checkpoint, connect):
    d = private_dir()
    svc = start_service(d, model=chat_checkpoint)
    try:
        b = connect(settings(endpoint=svc.endpoint, model_path=str(chat_checkpoint), prompt_format="chat"))
        res = b.infill(context(b, HOLE), canvas_length=16)
        assert not res.cancelled and res.error is None
        assert svc.health()["requests"]["done"] == 1
    finally:
        svc.kill(signal.SIGTERM)
        shutil.rmtree(d, ignore_errors=True)
