"""A raw JSON-RPC client of the real server (`python -m dg_lsp`, over pipes or TCP): any bytes in, framed messages
out. The one client-side frame reader and launcher of raw servers: bench and tests (tests/reliability's RawServer,
tests/lsp's stdio tests) use it.

For the reliability tests and `bench.reliability`: they send what no client library would (bad headers, broken
bodies, messages out of lifecycle order) and check what comes back. The server's requests to the client are
answered here (`workspace/applyEdit` with applied: true, recorded; anything else with a null result).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from bench.common import checkout_env

ROOT = Path(__file__).resolve().parents[1]


def frame(body: bytes | str, header: bytes | None = None) -> bytes:
    """`body` framed with a Content-Length header, or with exactly the `header` given (which ends the block)."""
    data = body.encode() if isinstance(body, str) else body
    return (header if header is not None else b"Content-Length: %d\r\n\r\n" % len(data)) + data


def message(**fields: Any) -> bytes:
    return frame(json.dumps({"jsonrpc": "2.0", **fields}))


def sha256(text: str) -> str:
    """What dg/documentState reports for `text`."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def server_env() -> dict[str, str]:
    """Offline, on the CPU with one thread, importing this checkout."""
    return checkout_env(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")


def read_frames(stream: IO[bytes], on_message: Callable[[dict], None]) -> None:
    """Parse the server's output (which must be well framed) until EOF."""
    while True:
        length = None
        while True:
            line = stream.readline()
            if not line:
                return
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif line == b"\r\n" and length is not None:
                break
        on_message(json.loads(stream.read(length)))


class RawClient:
    """A JSON-RPC peer over a byte stream: `write` sends bytes, `stream` is read until EOF. Every message that
    comes in is kept in `messages`, in order."""

    def __init__(self, write: Callable[[bytes], None], stream: IO[bytes]) -> None:
        self.messages: list[dict] = []
        self.answers: dict[Any, list[dict]] = {}  # our request id -> the responses to it
        self.answered_at: dict[Any, float] = {}  # our request id -> time.monotonic() when its first answer came
        self.applied: list[tuple[float, dict]] = []  # (when, params) of each workspace/applyEdit
        self.broken = False  # a write failed: the peer no longer reads
        self.answer_requests = True  # False: the server's requests (applyEdit, ...) are recorded, never answered
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        # Writes go through one thread, so that the reader thread (which answers the server's requests) never
        # waits on a pipe the server is not draining while it writes to us.
        self._out: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_all, args=(write,), daemon=True)
        self._writer.start()
        self._reader = threading.Thread(target=read_frames, args=(stream, self._received), daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        """The peer closed its end (EOF read)."""
        return not self._reader.is_alive()

    def stop_writing(self) -> None:
        self._out.put(None)

    # -- sending -----------------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue raw bytes for the server's stdin, in order (`broken` turns true if it stops reading)."""
        self._out.put(data)

    def _write_all(self, write: Callable[[bytes], None]) -> None:
        while (data := self._out.get()) is not None:
            try:
                write(data)
            except (OSError, ValueError):
                self.broken = True

    def new_id(self) -> int:
        return next(self._ids)

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        """Send a request; returns its id."""
        msg_id = self.new_id() if msg_id is None else msg_id
        self.send(message(id=msg_id, method=method, **({} if params is None else {"params": params})))
        return msg_id

    def notify(self, method: str, params: Any = None) -> None:
        self.send(message(method=method, **({} if params is None else {"params": params})))

    def call(self, method: str, params: Any = None, timeout: float = 30.0) -> dict | None:
        """A request and its response (None when none came within `timeout`)."""
        return self.answer(self.request(method, params), timeout)

    # -- receiving ---------------------------------------------------------------------------------------

    def _received(self, msg: dict) -> None:
        if "method" in msg and "id" in msg:  # the server asks us something
            result: Any = None
            if msg["method"] == "workspace/applyEdit":
                self.applied.append((time.monotonic(), msg["params"]))
                result = {"applied": True}
            if self.answer_requests:
                self.send(message(id=msg["id"], result=result))
        with self._cond:
            self.messages.append(msg)
            if "method" not in msg and "id" in msg:
                self.answers.setdefault(msg["id"], []).append(msg)
                self.answered_at.setdefault(msg["id"], time.monotonic())
            self._cond.notify_all()

    def find(self, pred: Callable[[dict], bool], since: int = 0, timeout: float = 30.0) -> int | None:
        """The index in `messages` of the first message from `since` on that matches `pred`, waiting up to `timeout`
        seconds (None: none came, or the peer closed its end with none)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(since, len(self.messages)):
                    if pred(self.messages[i]):
                        return i
                since = len(self.messages)
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return None
                self._cond.wait(min(left, 0.5))

    def wait(self, pred: Callable[[dict], bool], timeout: float = 30.0, since: int = 0) -> dict | None:
        """The first message from index `since` on that matches `pred`, waiting up to `timeout` seconds."""
        i = self.find(pred, since, timeout)
        return None if i is None else self.messages[i]

    def answer(self, msg_id: Any, timeout: float = 30.0) -> dict | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.answers.get(msg_id):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return None
                self._cond.wait(min(left, 0.5))
            return self.answers[msg_id][0]

    def null_errors(self, since: int = 0) -> list[dict]:
        """Error answers with id null (to messages whose id could not be read) from message index `since` on."""
        with self._cond:
            return [m for m in self.messages[since:] if "error" in m and m.get("id", 0) is None]

    def mark(self) -> int:
        """The index the next message will have (for `wait(..., since=)` and `null_errors`)."""
        with self._cond:
            return len(self.messages)

    # -- lifecycle ---------------------------------------------------------------------------------------

    def initialize(self, capabilities: dict | None = None, options: dict | None = None,
                   initialized: bool = False, timeout: float = 60.0) -> dict:
        params = {"processId": None, "rootUri": None, "capabilities": capabilities or {}}
        if options is not None:
            params["initializationOptions"] = options
        res = self.call("initialize", params, timeout)
        if res is None or "result" not in res:
            raise RuntimeError(f"initialize failed: {res}")
        if initialized:
            self.notify("initialized", {})
        return res["result"]

    def wait_ready(self, timeout: float = 120.0) -> dict | None:
        """The dg/status that says the model loaded (or failed to)."""
        return self.wait(lambda m: m.get("method") == "dg/status" and m["params"]["state"] in ("ready", "error"),
                         timeout)

    def open(self, uri: str, text: str, language_id: str = "python", version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language_id,
                                                              "version": version, "text": text}})

    def state(self, uri: str, timeout: float = 30.0) -> dict | None:
        """dg/documentState's answer for `uri` (its result or error)."""
        return self.call("dg/documentState", {"textDocument": {"uri": uri}}, timeout)

    def serving(self, timeout: float = 15.0) -> bool:
        """A fresh document opened and read back intact: the server still reads and answers valid messages."""
        uri = f"file:///probe-{self.new_id()}.txt"
        text = "probe \u00e9\U0001f600\n"
        self.open(uri, text, "plaintext")
        res = self.state(uri, timeout)
        return res is not None and res.get("result", {}).get("sha256") == sha256(text)



class RawServer(RawClient):
    """`python -m dg_lsp *args` over pipes (or `command` + `args`: another server, such as a test's scripted one)."""

    def __init__(self, *args: str, stderr: IO[bytes] | int = subprocess.DEVNULL,
                 command: list[str] | None = None) -> None:
        cmd = command if command is not None else [sys.executable, "-m", "dg_lsp"]
        self.proc = subprocess.Popen([*cmd, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                     env=server_env())
        super().__init__(self._write_stdin, self.proc.stdout)

    def _write_stdin(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return kb / 1024

    def close(self, timeout: float = 10.0) -> int | None:
        """shutdown + exit when still running; the exit code (None when it had to be killed)."""
        if self.alive():
            self.call("shutdown", None, timeout)
            self.notify("exit")
        self.stop_writing()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        return code

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_writing()
        if self.alive():
            self.proc.kill()
            self.proc.wait()


def connect_tcp(host: str, port: int, timeout: float = 30.0) -> tuple[RawClient, socket.socket]:
    """A RawClient on a TCP connection to a server that may still be starting (retried until `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    sock.settimeout(None)
    return RawClient(sock.sendall, sock.makefile("rb")), sock
