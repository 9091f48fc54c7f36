"""The process edge, driven with raw bytes: malformed JSON-RPC frames, invalid params, settings errors at
initialize, shutdown/exit codes, --version, --check and --tcp."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
from typing import IO

import pytest
from server_harness import server_command, server_env

from bench.rawlsp import frame, message, read_frames


class Reader(threading.Thread):
    """The server's stdout (or a socket file) parsed by bench.rawlsp's frame reader into a queue."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(daemon=True)
        self.stream, self.messages = stream, queue.Queue()

    def run(self) -> None:
        read_frames(self.stream, self.messages.put)

    def until(self, pred, timeout: float = 30.0) -> tuple[dict, list[dict]]:
        """The first message matching `pred`, and every message seen before it."""
        seen, deadline = [], time.monotonic() + timeout
        while True:
            msg = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            if pred(msg):
                return msg, seen
            seen.append(msg)


def response_to(msg_id):
    return lambda m: "method" not in m and m.get("id") == msg_id


INIT = dict(processId=None, rootUri=None, capabilities={})


def test_malformed_frames_get_errors_and_the_server_keeps_serving(tiny_ckpt):
    proc = subprocess.Popen(server_command(tiny_ckpt), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=server_env())
    reader = Reader(proc.stdout)
    reader.start()
    send = lambda data: (proc.stdin.write(data), proc.stdin.flush())  # noqa: E731
    try:
        send(message(id=1, method="initialize", params=dict(INIT, initializationOptions={
            "steps": 0, "bogusKey": True, "drafts": True})))
        init, before = reader.until(response_to(1))
        assert "inlineCompletionProvider" in init["result"]["capabilities"]
        send(message(method="initialized", params={}))
        # Asked while the model loads (torch alone takes over a second to import): an answer, not an error.
        send(message(method="textDocument/didOpen", params={"textDocument": {
            "uri": "file:///a.txt", "languageId": "plaintext", "version": 1, "text": "alpha beta\ngamma\n"}}))
        send(message(id=10, method="textDocument/inlineCompletion", params={
            "textDocument": {"uri": "file:///a.txt"}, "position": {"line": 0, "character": 5},
            "context": {"triggerKind": 1}}))
        early, seen = reader.until(response_to(10))
        assert "error" not in early and early["result"] is None
        statuses = [m["params"] for m in seen if m.get("method") == "dg/status"]
        if statuses and statuses[-1]["state"] == "loading":
            assert any("model not ready" in s["message"] for s in statuses)
        warnings = [m["params"]["message"] for m in before if m.get("method") == "window/showMessage"]
        assert any("steps" in w for w in warnings) and any("bogusKey" in w for w in warnings), before

        send(frame(b"{this is not json"))
        err, _ = reader.until(lambda m: "error" in m and m.get("id") is None)
        assert err["error"]["code"] == -32700

        send(frame(b"\xff\xfe\x00 binary"))
        err, _ = reader.until(lambda m: "error" in m and m.get("id") is None)
        assert err["error"]["code"] == -32700

        send(message(id=2, method="textDocument/inlineCompletion", params={"bogus": 1}))
        err, _ = reader.until(response_to(2))
        assert err["error"]["code"] == -32602 and "textDocument/inlineCompletion" in err["error"]["message"]

        send(b"X-Unknown-Header: 1\r\n" + message(id=3, method="workspace/executeCommand",
                                                  params={"command": "dg.nope", "arguments": []}))
        err, _ = reader.until(response_to(3))
        assert "unknown command" in err["error"]["message"]

        reader.until(lambda m: m.get("method") == "dg/status" and m["params"]["state"] == "ready")
        send(message(id=4, method="workspace/executeCommand", params={"command": "dg.fillHole", "arguments": [
            {"textDocument": {"uri": "file:///a.txt"}, "position": {"line": 0, "character": 5}}]}))
        apply, _ = reader.until(lambda m: m.get("method") == "workspace/applyEdit")
        send(message(id=apply["id"], result={"applied": True}))
        done, _ = reader.until(response_to(4))
        assert done["result"]["applied"] is True

        send(message(id=5, method="shutdown"))
        assert reader.until(response_to(5))[0]["result"] is None
        send(message(method="exit"))
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_version_and_check(tiny_ckpt):
    out = subprocess.run(server_command(tiny_ckpt, "--version"), capture_output=True, text=True, env=server_env(),
                         timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("dg-lsp ")
    out = subprocess.run(server_command(tiny_ckpt, "--check"), capture_output=True, text=True, env=server_env(),
                         timeout=120)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["ok"] is True and report["steps"] >= 1, out
    out = subprocess.run(server_command(tiny_ckpt.parent / "missing", "--check"), capture_output=True, text=True,
                         env=server_env(), timeout=120)
    assert out.returncode == 1 and json.loads(out.stdout)["ok"] is False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tcp_on_loopback(tiny_ckpt):
    port = free_port()
    proc = subprocess.Popen(server_command(tiny_ckpt, "--tcp", str(port)), env=server_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"no TCP listener (exit code {proc.poll()})")
                time.sleep(0.1)
        with sock:
            stream = sock.makefile("rwb")
            reader = Reader(stream)
            reader.start()
            stream.write(message(id=1, method="initialize", params=INIT))
            stream.flush()
            init, _ = reader.until(response_to(1))
            assert init["result"]["serverInfo"]["name"] == "dg-lsp"
    finally:
        proc.kill()
        proc.wait()


def test_stdout_carries_only_lsp_frames(tiny_ckpt):
    """Logging goes to stderr even at DEBUG: stdout must parse as frames from its first byte."""
    proc = subprocess.Popen(server_command(tiny_ckpt, "--log-level", "DEBUG"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=server_env())
    try:
        proc.stdin.write(message(id=1, method="initialize", params=INIT))
        proc.stdin.flush()
        assert proc.stdout.readline().startswith(b"Content-Length: ")
    finally:
        proc.kill()
        proc.wait()


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip("POSIX pipes")
