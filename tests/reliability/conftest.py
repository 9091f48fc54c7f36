"""Fixtures for tests/reliability: the real server driven through a raw pipe (bytes in, parsed frames out), and a
tiny random checkpoint."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # how long a test waits for any one message before it fails


def frame(body: dict | bytes) -> bytes:
    """One LSP frame: Content-Length header, blank line, body."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


class RawServer:
    """The real `dg-lsp` process over its stdin/stdout. `send` writes bytes as they are, so several messages written
    together reach the server in one read (as when the server is busy and a request and the next edit queue up).
    A reader thread parses frames into `seen` and answers the server's own requests (applyEdit: applied, recorded
    in `applied`; progress creation). `response` finds an answer whenever it came; `until` reads on from where the
    last `until` stopped."""

    def __init__(self, model: Path, *extra: str) -> None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="",
                   PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
        cmd = [sys.executable, "-m", "dg_lsp", "--model", str(model), *extra]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env)
        self.seen: list[dict] = []  # every message from the server, in order
        self._arrived = threading.Condition()
        self._cursor = 0  # where the next `until` starts reading `seen`
        self.applied: list[dict] = []  # workspace/applyEdit params
        self.versions: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._write = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()  # drain the log

    # -- bytes -------------------------------------------------------------------------------------------------
    def send(self, *messages: dict | bytes) -> None:
        """Write `messages` (dicts are framed; bytes go as they are) in ONE write."""
        data = b"".join(m if isinstance(m, bytes) else frame(m) for m in messages)
        with self._write:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif line == b"\r\n" and length is not None:
                    break
            msg = json.loads(out.read(length))
            if "method" in msg and "id" in msg:  # the server asks the client something
                self._answer(msg)
            with self._arrived:
                self.seen.append(msg)
                self._arrived.notify_all()

    def _answer(self, msg: dict) -> None:
        result: Any = None
        if msg["method"] == "workspace/applyEdit":
            self.applied.append(msg["params"])
            result = {"applied": True}
        self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

    # -- messages ----------------------------------------------------------------------------------------------
    def request(self, method: str, params: Any) -> tuple[int, dict]:
        """A request message (not sent): its id and the message."""
        msg_id = next(self._ids)
        return msg_id, {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}

    @staticmethod
    def notification(method: str, params: Any) -> dict:
        return {"jsonrpc": "2.0", "method": method, "params": params}

    def _find(self, pred: Callable[[dict], bool], start: int, timeout: float) -> int:
        """The index in `seen` of the first message from `start` on matching `pred` (waiting for it)."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            i = start
            while True:
                while i < len(self.seen):
                    if pred(self.seen[i]):
                        return i
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and i == len(self.seen):
                    raise TimeoutError(f"no matching message from the server (exit code {self.proc.poll()})")
                self._arrived.wait(min(left, 0.5))

    def until(self, pred: Callable[[dict], bool], timeout: float = WAIT_S) -> dict:
        """The next message matching `pred`, reading on from the last one `until` returned."""
        i = self._find(pred, self._cursor, timeout)
        self._cursor = i + 1
        return self.seen[i]

    def response(self, msg_id: int, timeout: float = WAIT_S) -> dict:
        """The answer to request `msg_id`, whenever it came."""
        return self.seen[self._find(lambda m: m.get("id") == msg_id and "method" not in m, 0, timeout)]

    def call(self, method: str, params: Any, timeout: float = WAIT_S) -> dict:
        """Send a request alone and wait for its answer (the whole response message)."""
        msg_id, msg = self.request(method, params)
        self.send(msg)
        return self.response(msg_id, timeout)

    # -- LSP -----------------------------------------------------------------------------------------------------
    def initialize(self, options: dict | None = None, wait: str | None = "ready") -> dict:
        """initialize + initialized; then wait for a dg/status with state `wait` (None: do not wait)."""
        caps = {"workspace": {"applyEdit": True, "workspaceEdit": {"documentChanges": True}},
                "textDocument": {"inlineCompletion": {}}}
        init = self.call("initialize", {"processId": None, "rootUri": None, "capabilities": caps,
                                        "initializationOptions": options})
        self.send(self.notification("initialized", {}))
        if wait is not None:
            self.status(wait)
        return init

    def status(self, state: str) -> dict:
        """The first dg/status (since the last one read) in `state` or "error" (which fails unless asked for)."""
        msg = self.until(lambda m: m.get("method") == "dg/status" and m["params"]["state"] in (state, "error"),
                         timeout=120)
        assert msg["params"]["state"] == state, msg["params"]
        return msg["params"]

    def open(self, uri: str, text: str, language_id: str = "plaintext") -> None:
        self.versions[uri] = 1
        self.send(self.notification("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": language_id, "version": 1, "text": text}}))

    def change(self, uri: str, start: tuple[int, int], end: tuple[int, int], text: str) -> dict:
        """A didChange message (not sent) replacing start..end with `text`; bumps the version."""
        self.versions[uri] += 1
        rng = {"start": {"line": start[0], "character": start[1]}, "end": {"line": end[0], "character": end[1]}}
        return self.notification("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": self.versions[uri]},
            "contentChanges": [{"range": rng, "text": text}]})

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return kb / 1024

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("shutdown", None, timeout=10)
                self.send(self.notification("exit", None))
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 -- a test already failed; do not hide why
                self.proc.kill()
                self.proc.wait()


def pos(line: int, character: int) -> dict:
    return {"line": line, "character": character}


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> Path:
    from engine.testing import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "mixed", "mixed", canvas_length=16)


@pytest.fixture
def start_server(tiny_ckpt) -> Any:
    """`start_server(options=None, model=None, wait="ready")`: a fresh server per call, closed after the test."""
    servers: list[RawServer] = []

    def start(options: dict | None = None, model: Path | None = None, wait: str | None = "ready") -> RawServer:
        srv = RawServer(model or tiny_ckpt)
        servers.append(srv)
        srv.init_result = srv.initialize(options, wait)
        return srv

    yield start
    for srv in servers:
        srv.close()
