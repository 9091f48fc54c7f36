"""Helpers for tests/service: engine services started as real processes (`python -m engine.service`) on Unix
sockets in private temporary directories, or in this process on a backend a test holds (`InProcessService`); the
environment children run with; a chat template for chat tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from engine.service.app import ServiceState, create_app

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "engine" / "default_model"
# A chat template in Gemma 4's turn format with the thinking switch (REFERENCE.md §7), for chat-format tests.
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|turn>{{ m.role }}\n{{ m.content }}<turn|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|turn>model\n{% if enable_thinking is defined and not enable_thinking"
                 " %}<|channel>thought\n<channel|>{% endif %}{% endif %}")


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def private_dir() -> Path:
    """A short path (Unix socket paths are limited to ~107 bytes), mode 0700."""
    return Path(tempfile.mkdtemp(prefix="dgs-"))


def wait_until(pred, timeout: float = 60.0, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what or pred}")
        time.sleep(0.02)
    return value


class Service:
    """A running engine service process."""

    def __init__(self, proc: subprocess.Popen, sock: Path, headers: dict[str, str] | None = None) -> None:
        self.proc, self.sock, self.headers = proc, sock, headers or {}

    @property
    def endpoint(self) -> str:
        return f"unix:{self.sock}"

    def http(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(transport=httpx.HTTPTransport(uds=str(self.sock)), base_url="http://dg-engine",
                            timeout=timeout, headers=self.headers)

    def health(self) -> dict | None:
        try:
            with self.http(2.0) as c:
                r = c.get("/health")
                return r.json() if r.status_code == 200 else None
        except httpx.HTTPError:
            return None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)


def start_service(directory: Path, *args: str, model: Path | None = None, env: dict | None = None) -> Service:
    sock = directory / "engine.sock"
    cmd = [sys.executable, "-m", "engine.service", "--uds", str(sock), *args]
    if model is not None:
        cmd += ["--model", str(model)]
    proc = subprocess.Popen(cmd, env=env or child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    svc = Service(proc, sock)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited: {proc.stderr.read().decode(errors='replace')}")
        h = svc.health()
        return bool(h and h["state"] == "ready")

    wait_until(ready, 120, "the engine service")
    return svc


class InProcessService:
    """engine.service's app on `backend` (loaded from `path`), in this process, served over TCP from a thread;
    `state` is the app's (a test may change its limits)."""

    def __init__(self, backend: Any, path: Path, **state: Any) -> None:
        self.state = ServiceState(**state)
        self.state.attach(backend, path)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(create_app(self.state), log_level="critical", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> InProcessService:
        self._thread.start()
        wait_until(lambda: self._server.started, 30, "the in-process service")
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()
