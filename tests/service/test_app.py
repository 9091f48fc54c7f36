"""The service's HTTP app in process, on a fake engine: OpenAI shapes, drafts, chat templates, the API key, limits
and malformed bodies (each a clear 4xx, and the service keeps answering)."""

from __future__ import annotations

import json
import shutil

import pytest
from service_fakes import FakeBackend
from service_harness import CHAT_TEMPLATE, DEFAULT_MODEL
from starlette.testclient import TestClient
from tokenizers import Tokenizer

from engine.config import load_config
from engine.service.app import ServiceState, create_app
from engine.service.requests import Limits

KEY = "s3cret-key"


def make(tmp_path, key: str | None = None, chat: bool = False, limits: Limits | None = None):
    """A served fake model in `tmp_path` (with a chat template when `chat`)."""
    shutil.copy(DEFAULT_MODEL / "tokenizer.json", tmp_path / "tokenizer.json")
    if chat:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<bos>",
                                                                     "chat_template": CHAT_TEMPLATE}))
    backend = FakeBackend(steps=3)
    backend.tokenizer = Tokenizer.from_file(str(DEFAULT_MODEL / "tokenizer.json"))  # what a chat template needs
    backend.config = load_config(DEFAULT_MODEL)
    state = ServiceState(limits=limits or Limits(), api_key=key)
    state.attach(backend, tmp_path)
    return TestClient(create_app(state)), backend, state


def sse(text: str) -> list:
    return [json.loads(line[6:]) if line != "data: [DONE]" else "[DONE]"
            for line in text.splitlines() if line.startswith("data: ")]


def test_completion_with_token_ids_and_with_text(tmp_path):
    client, backend, _ = make(tmp_path)
    r = client.post("/v1/completions", json={"model": tmp_path.name, "prompt": [3, 4, 5],
                                             "max_tokens": 8})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == tmp_path.name
    assert body["choices"][0]["text"] == "filled:3"
    assert body["usage"]["prompt_tokens"] == 3
    r = client.post("/v1/completions", json={"prompt": "ab", "suffix": "c"})
    assert r.json()["choices"][0]["text"] == "filled:7"  # bos, fim suffix, c, fim prefix, a, b, fim middle
    assert backend.calls[-1] == [1, 9, *backend.encode("c"), 8, *backend.encode("ab"), 7]


def test_streamed_drafts_then_the_final_text(tmp_path):
    client, _, _ = make(tmp_path)
    r = client.post("/v1/completions", json={"prompt": [3, 4], "stream": True, "dg": {"drafts": True}})
    events = sse(r.text)
    assert events[-1] == "[DONE]"
    drafts = [e["dg"] for e in events[:-2]]
    assert [d["step"] for d in drafts] == [1, 2, 3] and drafts[0]["draft"] == "f"
    final = events[-2]["choices"][0]
    assert final["finish_reason"] in ("stop", "length") and final["text"] == "filled:2"
    # a plain OpenAI client that concatenates the streamed texts gets the final text only
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == "filled:2"


def test_chat_completion_renders_the_template_with_its_kwargs(tmp_path):
    client, backend, _ = make(tmp_path, chat=True)
    msgs = [{"role": "user", "content": "fill it"}]
    on, off = (client.post("/v1/chat/completions",
                           json={"messages": msgs, "chat_template_kwargs": {"enable_thinking": v}})
               for v in (True, False))
    assert on.status_code == off.status_code == 200, off.text
    assert off.json()["object"] == "chat.completion"
    assert off.json()["choices"][0]["message"]["content"].startswith("filled:")
    thought = backend.encode("<|channel>thought\n<channel|>")
    assert backend.calls[-1][-len(thought):] == thought and backend.calls[-2][-len(thought):] != thought
    streamed = sse(client.post("/v1/chat/completions", json={"messages": msgs, "stream": True}).text)
    assert streamed[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in streamed[:-1]).startswith("filled:")


def test_chat_without_a_template_is_a_clear_400(tmp_path):
    client, _, _ = make(tmp_path)
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "chat template" in r.json()["error"]["message"]


def test_with_a_key_requests_without_it_get_401_and_are_not_queued(tmp_path):
    client, backend, state = make(tmp_path, key=KEY)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        assert client.get("/health", headers=headers).status_code == 401
        assert client.get("/v1/models", headers=headers).status_code == 401
        r = client.post("/v1/completions", json={"prompt": [3]}, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "AuthenticationError"
    assert backend.calls == [] and state.scheduler.stats()["requests"]["done"] == 0
    ok = client.post("/v1/completions", json={"prompt": [3]}, headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == "filled:1"


def test_a_seed_canvas_reaches_the_engine(tmp_path):
    client, backend, _ = make(tmp_path)
    r = client.post("/v1/completions", json={"prompt": [3, 4], "dg": {"init_ids": [5, 6, 7], "start_noise": 0}})
    assert r.status_code == 200, r.text
    assert backend.seeds[-1] == ([5, 6, 7], 0.0)
    client.post("/v1/completions", json={"prompt": [3, 4]})
    assert backend.seeds[-1] == (None, 1.0)  # unseeded: from noise


BAD = [
    (b"{", 400, "not valid JSON"),
    (b"\xff\xfe\x00", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b'{"prompt": NaN}', 400, "not valid JSON"),
    (b"[" * 100000 + b"]" * 100000, 400, "not valid JSON"),
    (b'{"prompt": 3}', 400, "prompt"),
    (b'{"prompt": []}', 400, "prompt"),
    (b'{"prompt": [1, 2.5]}', 400, "prompt"),
    (b'{"prompt": [100000]}', 400, "vocabulary"),
    (b'{"prompt": ["a", "b"]}', 400, "one prompt"),
    (b'{"prompt": [1], "max_tokens": 0}', 400, "max_tokens"),
    (b'{"prompt": [1], "max_tokens": "8"}', 400, "max_tokens"),
    (b'{"prompt": [1], "n": 2}', 400, "n = 1"),
    (b'{"prompt": [1], "stream": "yes"}', 400, "stream"),
    (b'{"prompt": [1], "dg": []}', 400, "dg"),
    (b'{"prompt": [1], "dg": {"canvas_length": 100000}}', 400, "canvas_length"),
    (b'{"prompt": [1], "dg": {"steps": true}}', 400, "steps"),
    (b'{"prompt": [1], "dg": {"entropy_bound": -1}}', 400, "entropy_bound"),
    (b'{"prompt": [1], "dg": {"drafts": true}}', 400, "stream: true"),
    (b'{"prompt": [1], "dg": {"client": ""}}', 400, "client"),
    (b'{"prompt": [1], "dg": {"init_ids": [1, "a"]}}', 400, "init_ids"),
    (b'{"prompt": [1], "dg": {"init_ids": [100000]}}', 400, "vocabulary"),
    (b'{"prompt": [1], "dg": {"init_ids": [1, 2, 3], "canvas_length": 2}}', 400, "canvases hold 2"),
    (b'{"prompt": [1], "dg": {"start_noise": 1.5}}', 400, "start_noise"),
    (b'{"prompt": [1], "dg": {"start_noise": true}}', 400, "start_noise"),
    (b'{"prompt": [1], "model": "another"}', 404, "does not exist"),
    (b'{"prompt": [1], "model": 7}', 400, "model"),
]


@pytest.mark.parametrize(("body", "status", "words"), BAD)
def test_malformed_bodies_get_a_clear_4xx_and_the_service_stays_up(tmp_path, body, status, words):
    client, backend, _ = make(tmp_path)
    r = client.post("/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert words in r.json()["error"]["message"]
    assert backend.calls == []
    assert client.post("/v1/completions", json={"prompt": [3]}).json()["choices"][0]["text"] == "filled:1"


def test_body_and_prompt_limits(tmp_path):
    limits = Limits(max_body_bytes=1000, max_prompt_tokens=50, max_canvas_length=8, max_canvases=2)
    client, backend, _ = make(tmp_path, limits=limits)
    big = json.dumps({"prompt": "x" * 2000}).encode()
    assert client.post("/v1/completions", content=big).status_code == 413
    chunked = client.post("/v1/completions", content=iter([big[:600], big[600:]]))  # no Content-Length
    assert chunked.status_code == 413
    r = client.post("/v1/completions", json={"prompt": [3] * 51})
    assert r.status_code == 413 and "at most 50" in r.json()["error"]["message"]
    r = client.post("/v1/completions", json={"prompt": [3], "max_tokens": 17})
    assert r.status_code == 400 and "1..16" in r.json()["error"]["message"]
    assert backend.calls == []


def test_before_the_model_is_loaded_fills_get_503_and_health_says_loading():
    state = ServiceState()
    client = TestClient(create_app(state))
    assert client.get("/health").json()["state"] == "loading"
    r = client.post("/v1/completions", json={"prompt": [1]})
    assert r.status_code == 503 and "loading" in r.json()["error"]["message"]
    state.fail("OSError: no such file")
    assert "no such file" in client.post("/v1/completions", json={"prompt": [1]}).json()["error"]["message"]


def test_unknown_routes_and_methods_answer_json_errors(tmp_path):
    client, _, _ = make(tmp_path)
    assert client.get("/v1/nothing").status_code == 404
    assert client.get("/v1/completions").status_code == 405
    assert client.get("/v1/dg/checkpoint/model.safetensors").status_code == 404  # weights are never served
    assert client.get("/v1/dg/checkpoint/..%2Fconfig.json").status_code == 404
    files = client.get("/v1/dg/checkpoint").json()["files"]
    assert set(files) == {"tokenizer.json"}
