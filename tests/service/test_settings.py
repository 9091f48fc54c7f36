"""The backend settings (backend, endpoint, apiKeyEnv, model, autoStart), the factory, and the worker's state
following a remote backend's server."""

from __future__ import annotations

import asyncio

import pytest

from dg_lsp.backends.factory import build_backend
from dg_lsp.backends.openai import openai_endpoint
from dg_lsp.backends.service import Endpoint
from dg_lsp.config import Settings, parse_settings
from dg_lsp.fill.worker import Worker


def test_backend_settings_parse_and_need_a_reload():
    s, errors = parse_settings({"backend": "openai", "endpoint": "http://gpu-box:8000/v1", "apiKeyEnv": "DG_API_KEY",
                                "model": "google/diffusiongemma-26B-A4B-it", "autoStart": False})
    assert errors == []
    assert (s.backend, s.endpoint, s.api_key_env, s.model, s.auto_start) == (
        "openai", "http://gpu-box:8000/v1", "DG_API_KEY", "google/diffusiongemma-26B-A4B-it", False)
    assert s.engine_key() != Settings().engine_key()
    assert Settings().backend == "embedded" and Settings().auto_start is True


@pytest.mark.parametrize(("key", "value"), [("backend", "vllm"), ("endpoint", "gpu-box:8000"),
                                            ("endpoint", "unix:relative.sock"), ("model", ""), ("autoStart", "yes")])
def test_bad_backend_settings_are_named_and_keep_their_defaults(key, value):
    s, errors = parse_settings({key: value})
    assert len(errors) == 1 and key in errors[0]
    assert s == Settings()


def test_a_key_pasted_into_api_key_env_is_refused_without_echoing_it():
    secret = "sk-live-0123456789abcdef"
    s, errors = parse_settings({"apiKeyEnv": secret})
    assert s.api_key_env is None and len(errors) == 1
    assert "name of an environment variable" in errors[0] and secret not in errors[0]


def test_endpoints():
    assert Endpoint.parse("unix:/run/user/1/dg-lsp/engine.sock").uds == "/run/user/1/dg-lsp/engine.sock"
    assert Endpoint.parse("http://127.0.0.1:8471/v1/").url == "http://127.0.0.1:8471"
    assert openai_endpoint("http://gpu-box:8000").url == "http://gpu-box:8000/v1"
    assert openai_endpoint("https://llm.example/team/v1/").url == "https://llm.example/team/v1"


def test_the_factory_names_what_is_missing(monkeypatch):
    with pytest.raises(ValueError, match="needs endpoint"):
        build_backend(Settings(backend="openai"))
    monkeypatch.delenv("DG_NOT_SET", raising=False)
    with pytest.raises(ValueError, match="DG_NOT_SET"):
        build_backend(Settings(backend="openai", endpoint="http://127.0.0.1:9/v1", api_key_env="DG_NOT_SET"))
    with pytest.raises(ConnectionError, match="no engine service answers"):
        build_backend(Settings(backend="service", endpoint="unix:/nonexistent/dg.sock", auto_start=False))


class Remote:
    """A backend whose server comes and goes (what ServiceBackend and OpenAIBackend report)."""

    name = "remote"

    def __init__(self) -> None:
        self.listeners = []

    def watch_state(self, listener) -> None:
        self.listeners.append(listener)

    def say(self, state: str, message: str) -> None:
        for fn in self.listeners:
            fn(state, message)


async def test_the_worker_state_follows_the_backend_and_reports_each_change():
    remote = Remote()
    worker = Worker(factory=lambda settings: remote, check=None)  # no check fill: the fake fills nothing
    heard: list[tuple[str, str]] = []
    worker.on_state_change = lambda message: heard.append((worker.state, message))
    await worker.load(Settings())
    assert worker.state == "ready"
    remote.say("error", "the engine service is not answering")
    await asyncio.sleep(0.05)
    assert worker.state == "error" and worker.error == "the engine service is not answering"
    remote.say("ready", "back")
    await asyncio.sleep(0.05)
    assert worker.state == "ready" and worker.error is None
    assert heard == [("error", "the engine service is not answering"), ("ready", "back")]
    await worker.load(Settings())  # a reload: the old backend's news no longer counts
    remote.listeners[0]("error", "stale")
    await asyncio.sleep(0.05)
    assert worker.state == "ready"
    worker.shutdown()
