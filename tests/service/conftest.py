"""Fixtures for tests/service: a private runtime and cache directory for every test (auto-start and the checkpoint
cache never touch the user's own), a shared service on the shipped model, and a chat checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import httpx
import pytest
from service_harness import CHAT_TEMPLATE, DEFAULT_MODEL, private_dir, start_service

from dg_lsp.backends.factory import build_backend


@pytest.fixture(autouse=True)
def private_runtime(monkeypatch, tmp_path_factory):
    """Auto-started services and the checkpoint cache of this test live in its own directories."""
    run = private_dir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    yield run
    for lock in run.glob("dg-lsp/*.sock.lock"):  # stop any service a test auto-started
        sock = lock.with_suffix("")
        try:
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=2) as c:
                os.kill(c.get("http://x/health").json()["pid"], signal.SIGTERM)
        except (httpx.HTTPError, OSError, KeyError, ValueError):
            pass
    shutil.rmtree(run, ignore_errors=True)


@pytest.fixture(scope="module")
def service():
    """One service on the shipped model, shared by a module's tests (each test uses its own client ids)."""
    d = private_dir()
    svc = start_service(d)
    yield svc
    svc.kill(signal.SIGTERM)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def chat_checkpoint(tmp_path_factory) -> Path:
    """The shipped model with a chat template beside it (its weights linked, not copied)."""
    d = tmp_path_factory.mktemp("chat") / "chat_model"
    d.mkdir()
    for f in DEFAULT_MODEL.iterdir():
        if f.name != "tokenizer_config.json":  # written below: through a link it would overwrite the shipped one
            (d / f.name).symlink_to(f)
    (d / "tokenizer_config.json").write_text(
        '{"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "chat_template": '
        + json.dumps(CHAT_TEMPLATE) + "}")
    return d


@pytest.fixture
def connect():
    """build_backend, with every backend the test made closed at its end (their watchers stop)."""
    made = []

    def build(settings):
        made.append(build_backend(settings))
        return made[-1]

    yield build
    for backend in made:
        backend.close()
