"""The service going away under a running client: the client's state turns to error, fills answer empty instead of
hanging, and it reconnects when the service is back (started by hand, or by the client itself with autoStart)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import httpx
from service_harness import child_env, private_dir, start_service, wait_until

from dg_lsp.backends.autostart import socket_path
from dg_lsp.config import Settings

PREFIX, SUFFIX = "for item in items:\n    ", "\n"


def fill(backend) -> object:
    ids = backend.prompt_format.context(backend.encode(PREFIX), backend.encode(SUFFIX))
    return backend.infill(ids, canvas_length=16)


def test_the_service_killed_and_restarted_by_hand_under_a_running_client(connect):
    d = private_dir()
    svc = start_service(d)
    try:
        backend = connect(Settings(backend="service", endpoint=svc.endpoint, auto_start=False))
        states: list[tuple[str, str]] = []
        backend.watch_state(lambda state, message: states.append((state, message)))
        first = fill(backend)
        assert first.text and not first.cancelled
        svc.kill(signal.SIGKILL)
        wait_until(lambda: states and states[-1][0] == "error", 10, "the client to notice")
        assert "not answering" in states[-1][1]
        away = fill(backend)  # answers at once, empty: a failure with its reason, not a cancel
        assert away.text == "" and not away.cancelled and "not answering" in away.error
        svc = start_service(d)
        wait_until(lambda: states[-1][0] == "ready", 30, "the client to reconnect")
        again = fill(backend)
        assert again.text == first.text and not again.cancelled
    finally:
        svc.kill(signal.SIGTERM)
        shutil.rmtree(d, ignore_errors=True)


def test_with_auto_start_the_client_starts_the_service_and_brings_it_back(connect):
    backend = connect(Settings(backend="service"))  # nothing runs yet: this starts it
    sock = socket_path(None, "auto", "auto")
    assert backend.endpoint.uds == str(sock)
    assert oct(sock.parent.stat().st_mode & 0o777) == "0o700" and oct(sock.stat().st_mode & 0o777) == "0o600"
    states: list[str] = []
    backend.watch_state(lambda state, message: states.append(state))
    first = fill(backend)
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock))) as http:
        pid = http.get("http://x/health").json()["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: "error" in states, 10, "the client to notice")
        wait_until(lambda: states[-1] == "ready", 60, "the service to be back")
        health = http.get("http://x/health").json()
    assert health["pid"] != pid and health["model_loads"] == 1
    assert fill(backend).text == first.text


def test_two_clients_auto_starting_at_once_start_one_service():
    code = ("import json, httpx\nfrom dg_lsp.backends.factory import build_backend\nfrom dg_lsp.config import "
            "Settings\nb = build_backend(Settings(backend='service'))\nwith httpx.Client(transport=httpx."
            "HTTPTransport(uds=b.endpoint.uds)) as h:\n    print(json.dumps(h.get('http://x/health').json()))\n")
    env = child_env()  # the test's private XDG_RUNTIME_DIR and XDG_CACHE_HOME
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    report = [(p.returncode, out[-400:], err[-800:]) for p, (out, err) in zip(procs, outs, strict=True)]
    assert all(p.returncode == 0 for p in procs), report
    healths = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert healths[0]["pid"] == healths[1]["pid"]
    assert healths[0]["model_loads"] == 1
    sock = socket_path(None, "auto", "auto")
    running = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).count(str(sock)) == 1
               and "engine.service" in _cmdline(p)]
    assert running == [str(healths[0]["pid"])]


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
