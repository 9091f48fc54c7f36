"""The engine service (`dg-lsp serve-engine --model FILE.gguf`) on a GGUF with nothing beside it: the shipped model
written as a Q8_0/F32 GGUF answers a text completion with a fill, and a chat-format GGUF (tokenizer and chat template
only in its metadata) answers /v1/chat/completions through the file's template."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from service_harness import Service, child_env, private_dir, wait_until

from engine.engine import Engine
from engine.formats.gguf_write import write_gguf, write_shipped
from engine.testing.published import CHAT_TEMPLATE, VOCAB_SIZE, gemma_style_tokenizer
from engine.testing.tiny import build_tiny_checkpoint

PREFIX = "import math\n\n\ndef distance(p, q):\n    dx = q[0] - p[0]\n    dy = q[1] - p[1]\n    return math."


def serve_engine(model) -> Service:
    """`python -m dg_lsp serve-engine --model FILE` on a Unix socket in a private directory, once ready."""
    sock = private_dir() / "engine.sock"
    cmd = [sys.executable, "-m", "dg_lsp", "serve-engine", "--uds", str(sock), "--model", str(model)]
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    svc = Service(proc, sock)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited: {proc.stderr.read().decode(errors='replace')}")
        h = svc.health()
        return bool(h and h["state"] == "ready")

    wait_until(ready, 120, "the engine service on a GGUF")
    return svc


def chat_gguf(tmp_path) -> Path:
    """A tiny chat checkpoint (Gemma-style tokenizer and template) as an F32 GGUF with nothing beside it."""
    src = build_tiny_checkpoint(tmp_path / "hf", "mixed", canvas_length=16, seed=3, vocab_size=VOCAB_SIZE)
    (src / "infill.json").unlink()
    gemma_style_tokenizer().save(str(src / "tokenizer.json"))
    (src / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (tmp_path / "alone").mkdir()
    return write_gguf(src, tmp_path / "alone" / "chat-F32.gguf", "F32")


@pytest.fixture
def served():
    started = []

    def start(model) -> Service:
        started.append(serve_engine(model))
        return started[-1]

    yield start
    for svc in started:
        svc.kill(signal.SIGTERM)
        shutil.rmtree(svc.sock.parent, ignore_errors=True)


def test_a_service_on_the_shipped_model_as_gguf_answers_a_fill(served, tmp_path):
    path = write_shipped(tmp_path / "alone")
    svc = served(path)
    health = svc.health()
    assert health["path"] == str(path) and health["model"] == path.name
    with svc.http(120) as c:
        r = c.post("/v1/completions", json={"prompt": PREFIX, "suffix": "\n", "max_tokens": 16})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == path.name and body["choices"][0]["text"].strip(), body
    assert body["usage"]["completion_tokens"] >= 1


def test_a_service_on_a_chat_gguf_uses_the_files_template(served, tmp_path):
    path = chat_gguf(tmp_path)
    svc = served(path)
    messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    with svc.http(120) as c:
        r = c.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 16})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and isinstance(body["choices"][0]["message"]["content"], str)
    # the prompt is the file's template rendered (thinking off): bos, the user turn, the model's turn opened
    n_prompt = body["usage"]["prompt_tokens"]
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    want = eng.prompt_format.template.render(messages)
    assert want.startswith("<bos><|turn>user\n") and want.endswith("<|turn>model\n<|channel>thought\n<channel|>")
    assert n_prompt == len(eng.encode(want))


def _client_backend(svc: Service):
    from dg_lsp.backends.factory import build_backend
    from dg_lsp.config import Settings

    return build_backend(Settings(backend="service", endpoint=svc.endpoint, auto_start=False))


def test_the_language_servers_service_backend_fills_from_a_gguf_as_the_embedded_engine(served, tmp_path):
    """A GGUF has no config.json or tokenizer.json beside it: the service writes them from what it loaded (its config,
    the tokenizer rebuilt from the metadata) so dg-lsp's `service` backend lays out prompts as the engine does."""
    path = write_shipped(tmp_path / "alone")
    assert not (path.parent / "config.json").exists() and not (path.parent / "tokenizer.json").exists()
    svc = served(path)
    with svc.http(30) as c:
        files = c.get("/v1/dg/checkpoint").json()["files"]
    assert {"config.json", "generation_config.json", "tokenizer.json"} <= set(files)
    eng = Engine.from_pretrained(path, device="cpu")
    backend = _client_backend(svc)
    try:
        suffix = "\n\nprint(distance((0, 0), (3, 4)))\n"
        ids = backend.prompt_format.context(backend.encode(PREFIX), backend.encode(suffix))
        assert ids == eng.prompt_format.context(eng.encode(PREFIX), eng.encode(suffix))
        assert backend.prompt_format.canvas_lengths == eng.prompt_format.canvas_lengths
        got, want = backend.infill(ids, canvas_length=16), eng.infill(ids, canvas_length=16)
        assert got.error is None and not got.cancelled and got.text == want.text and got.steps == want.steps
    finally:
        backend.close()


def test_a_chat_gguf_through_the_service_backend_gets_the_files_template(served, tmp_path):
    path = chat_gguf(tmp_path)
    # a tokenizer_config.json beside it without a template: the file's template still applies, as in the engine
    (path.parent / "tokenizer_config.json").write_text('{"model_max_length": 4096}')
    svc = served(path)
    backend = _client_backend(svc)
    try:
        eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
        assert backend.prompt_format.name == eng.prompt_format.name == "chat"
        messages = [{"role": "user", "content": "hi"}]
        assert backend.prompt_format.template.render(messages) == eng.prompt_format.template.render(messages)
    finally:
        backend.close()
