"""Off Linux: the start path without Unix sockets, `fcntl` or glibc (what Windows lacks; macOS lacks glibc). The real
server and the engine service it auto-starts run with those hidden (tests/service/hide_unix) and fill over loopback
TCP behind a per-user token; the pieces of that fallback are checked on their own. Run on Linux only: nothing here
has run on macOS or Windows themselves."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from service_harness import ROOT, child_env

from bench.rawlsp import RawClient
from dg_lsp import memory
from dg_lsp.backends import autostart

HIDE = Path(__file__).resolve().parent / "hide_unix"
TEXT = "import math\n\n\ndef distance(p, q):\n    dx = q[0] - p[0]\n    dy = q[1] - p[1]\n    return math.\n"
URI = "file:///work/distance.py"


def hidden_env() -> dict[str, str]:
    return child_env(DG_HIDE_UNIX="1", PYTHONPATH=os.pathsep.join((str(HIDE), str(ROOT))))


def test_the_hiding_hides(tmp_path):
    probe = ("import socket, os, importlib.util as u; from dg_lsp import memory; from dg_lsp.backends import autostart;"
             "print(hasattr(socket, 'AF_UNIX'), autostart.unix_sockets(), memory.glibc(), memory._trim())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=hidden_env(),
                         cwd=tmp_path, timeout=60)
    assert out.stdout.split() == ["False", "False", "False", "None"], out.stderr


def test_the_server_and_its_auto_started_service_fill_without_unix_facilities(tmp_path, private_runtime):
    proc = subprocess.Popen([sys.executable, "-m", "dg_lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=hidden_env(), cwd=tmp_path)

    def write(data: bytes) -> None:
        proc.stdin.write(data)
        proc.stdin.flush()

    client = RawClient(write, proc.stdout)
    service_pid = None
    try:
        client.initialize({"textDocument": {"inlineCompletion": {}}},
                          {"backend": "service", "debounceMs": 0, "minConfidence": 0}, initialized=True, timeout=120)
        ready = client.wait_ready(180)
        assert ready is not None and ready["params"]["state"] == "ready", (ready, proc.poll())
        assert "engine service http://127.0.0.1:" in ready["params"]["model"]
        client.open(URI, TEXT)
        answer = client.call("textDocument/inlineCompletion", {"textDocument": {"uri": URI}, "position": {
            "line": 6, "character": 16}, "context": {"triggerKind": 1}}, timeout=120)
        assert answer is not None and answer["result"]["items"], answer
        assert answer["result"]["items"][0]["insertText"].strip()

        run = private_runtime / "dg-lsp"
        (endpoint,) = run.glob("engine-*.json")
        assert not list(run.glob("*.sock*")) and not (run / "start.lock").exists()  # the lock file was released
        assert stat.S_IMODE(endpoint.stat().st_mode) == 0o600
        found = json.loads(endpoint.read_text())
        assert len(found["token"]) >= 32 and f":{found['port']})" in ready["params"]["model"]
        base = f"http://127.0.0.1:{found['port']}"
        assert httpx.get(f"{base}/v1/models", timeout=10).status_code == 401  # the service checks the token
        auth = {"Authorization": f"Bearer {found['token']}"}
        health = httpx.get(f"{base}/health", headers=auth, timeout=10).json()
        service_pid = health["pid"]
        cmdline = Path(f"/proc/{service_pid}/cmdline").read_bytes().split(b"\0")
        assert b"--api-key-env" in cmdline and b"--uds" not in cmdline
        environ = Path(f"/proc/{service_pid}/environ").read_bytes().split(b"\0")
        assert b"DG_HIDE_UNIX=1" in environ  # it ran hidden as well

        assert client.call("shutdown", None, timeout=30)["result"] is None
        client.notify("exit")
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()[-2000:]
    finally:
        client.stop_writing()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
        if service_pid is not None:
            os.kill(service_pid, signal.SIGTERM)


def test_the_tcp_rendezvous_is_made_once_and_private(monkeypatch, private_runtime):
    monkeypatch.setattr(autostart, "fcntl", None)
    monkeypatch.setattr(autostart, "unix_sockets", lambda: False)
    first = autostart.local_service(None, "cpu", "auto")
    again = autostart.local_service(None, "cpu", "auto")
    other = autostart.local_service(None, "cpu", "float32")
    assert first == again and first.uds is None and first.url.startswith("http://127.0.0.1:")
    assert other.base != first.base and other.token != first.token
    assert stat.S_IMODE(first.base.stat().st_mode) == 0o600
    starter = autostart.AutoStart(first.base, None, "cpu", "auto", tcp=first)
    assert starter.argv[starter.argv.index("--port") + 1] == str(first.port) and "--uds" not in starter.argv
    assert starter.log_path == first.base.with_suffix(".log")


def test_the_lock_file_without_fcntl_excludes_and_outlives_a_dead_holder(monkeypatch, tmp_path):
    monkeypatch.setattr(autostart, "fcntl", None)
    lock = tmp_path / "start.lock"
    with autostart._locked(lock, 1.0):
        assert lock.exists()
        with pytest.raises(TimeoutError, match="stayed locked"), autostart._locked(lock, 0.2):
            pass
    assert not lock.exists()
    lock.touch()  # left by a process that died while holding it
    old = time.time() - autostart.START_TIMEOUT_S - autostart.RESPAWN_GAP_S - 60
    os.utime(lock, (old, old))
    with autostart._locked(lock, 1.0):
        assert lock.stat().st_mtime > old


def test_no_glibc_no_re_execution(monkeypatch):
    def refuse(*args):
        raise AssertionError("re-executed")

    monkeypatch.delenv("PYTHONMALLOC", raising=False)
    monkeypatch.setattr(os, "execve", refuse)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not memory.glibc() and not memory.release_free_memory()
    memory.use_system_allocator([])  # returns: nothing to re-execute for
