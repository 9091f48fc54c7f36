"""`dg-lsp serve-engine` security at start-up: no key, no listening beyond loopback; a socket only in a private
directory, one service per socket; with a key, a real TCP service answers 401 without it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys

import httpx
import pytest
from service_harness import child_env, private_dir, start_service, wait_until

from dg_lsp.config import Settings
from engine.service.cli import EXIT_RUNNING, EXIT_USAGE, is_loopback


def serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.service", *args], env=env or child_env(),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("host", "loop"), [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                            ("127.0.0.2", True), ("0.0.0.0", False), ("10.1.2.3", False),
                                            ("::", False), ("build-box.example", False)])
def test_loopback_hosts(host, loop):
    assert is_loopback(host) is loop


def test_a_non_loopback_host_without_a_key_refuses_to_start():
    out = serve("--host", "0.0.0.0")
    assert out.returncode == EXIT_USAGE
    assert "refusing to listen on 0.0.0.0 without an API key" in out.stderr


def test_a_key_variable_that_is_not_set_refuses_to_start():
    env = child_env()
    env.pop("DG_TEST_KEY_UNSET", None)
    out = serve("--host", "0.0.0.0", "--api-key-env", "DG_TEST_KEY_UNSET", env=env)
    assert out.returncode == EXIT_USAGE and "DG_TEST_KEY_UNSET" in out.stderr


def test_a_socket_in_a_directory_others_can_enter_is_refused():
    d = private_dir()
    os.chmod(d, 0o755)
    out = serve("--uds", str(d / "engine.sock"))
    assert out.returncode == EXIT_USAGE and "open to other users" in out.stderr
    shutil.rmtree(d)


def test_a_second_service_on_the_same_socket_exits_and_the_first_keeps_serving():
    d = private_dir()
    svc = start_service(d)
    try:
        out = serve("--uds", str(svc.sock))
        assert out.returncode == EXIT_RUNNING and "already serving" in out.stderr
        assert svc.health()["state"] == "ready"
    finally:
        svc.kill(signal.SIGTERM)
        shutil.rmtree(d, ignore_errors=True)


def test_with_a_key_a_tcp_service_answers_401_without_it(monkeypatch, connect):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = child_env(DG_TEST_KEY="k-123")
    proc = subprocess.Popen([sys.executable, "-m", "engine.service", "--port", str(port), "--api-key-env",
                             "DG_TEST_KEY"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    good = {"Authorization": "Bearer k-123"}
    try:
        def ready() -> bool:
            try:
                return httpx.get(f"{url}/health", headers=good, timeout=2).json()["state"] == "ready"
            except httpx.HTTPError:
                return False

        wait_until(ready, 120, "the keyed service")
        assert httpx.get(f"{url}/health").status_code == 401
        bad = httpx.post(f"{url}/v1/completions", json={"prompt": [2, 3]}, headers={"Authorization": "Bearer no"})
        assert bad.status_code == 401
        ok = httpx.post(f"{url}/v1/completions", json={"prompt": [2, 3], "max_tokens": 16}, headers=good, timeout=60)
        assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("stop", "length")
        assert httpx.get(f"{url}/health", headers=good).json()["requests"]["done"] == 1  # the 401s never queued
        # the service backend over TCP with the key from apiKeyEnv; a wrong key is named as such
        monkeypatch.setenv("DG_TEST_KEY", "k-123")
        monkeypatch.setenv("DG_WRONG_KEY", "k-456")
        backend = connect(Settings(backend="service", endpoint=url, api_key_env="DG_TEST_KEY"))
        ids = backend.prompt_format.context(backend.encode("x = "), backend.encode("\n"))
        assert not backend.infill(ids, canvas_length=16).cancelled
        with pytest.raises(PermissionError, match="refused the API key"):
            connect(Settings(backend="service", endpoint=url, api_key_env="DG_WRONG_KEY"))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
