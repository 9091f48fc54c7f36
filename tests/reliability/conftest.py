"""Fixtures for tests/reliability: the real server driven through a raw pipe (bytes in, parsed frames out), and a
tiny random checkpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import rawlsp

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # how long a test waits for any one message before it fails


class RawServer:
    """The real `dg-lsp` process over its stdin/stdout, as these tests drive it: bench.rawlsp's RawServer (the one
    frame reader and launcher of bench and tests, which answers the server's requests: applyEdit applied, recorded)
    behind the calls the tests read best. `send` writes bytes as they are, so several messages written together
    reach the server in one read (as when the server is busy and a request and the next edit queue up).
    `response` finds an answer whenever it came; `until` reads on from where the last `until` stopped; both raise
    TimeoutError when nothing matching came. `command`: start that instead of `python -m dg_lsp` (then `model` is
    None)."""

    def __init__(self, model: Path | None, *extra: str, command: list[str] | None = None) -> None:
        self._raw = rawlsp.RawServer(*(["--model", str(model)] if model is not None else []), *extra,
                                     command=command)
        self.proc = self._raw.proc
        self.seen = self._raw.messages  # every message from the server, in order
        self._cursor = 0  # where the next `until` starts reading `seen`
        self.versions: dict[str, int] = {}

    @property
    def applied(self) -> list[dict]:
        """workspace/applyEdit params, in order."""
        return [params for _, params in self._raw.applied]

    # -- bytes -------------------------------------------------------------------------------------------------
    def send(self, *messages: dict | bytes) -> None:
        """Write `messages` (dicts are framed; bytes go as they are) in ONE write."""
        self._raw.send(b"".join(m if isinstance(m, bytes) else rawlsp.frame(json.dumps(m)) for m in messages))

    # -- messages ----------------------------------------------------------------------------------------------
    def request(self, method: str, params: Any) -> tuple[int, dict]:
        """A request message (not sent): its id and the message."""
        msg_id = self._raw.new_id()
        return msg_id, {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}

    @staticmethod
    def notification(method: str, params: Any) -> dict:
        return {"jsonrpc": "2.0", "method": method, "params": params}

    def _find(self, pred: Callable[[dict], bool], start: int, timeout: float) -> int:
        """The index in `seen` of the first message from `start` on matching `pred` (waiting for it)."""
        i = self._raw.find(pred, start, timeout)
        if i is None:
            raise TimeoutError(f"no matching message from the server (exit code {self.proc.poll()})")
        return i

    def until(self, pred: Callable[[dict], bool], timeout: float = WAIT_S) -> dict:
        """The next message matching `pred`, reading on from the last one `until` returned."""
        i = self._find(pred, self._cursor, timeout)
        self._cursor = i + 1
        return self.seen[i]

    def stop_answering(self) -> None:
        """From now on the server's requests (workspace/applyEdit, ...) get no answer: they stay pending."""
        self._raw.answer_requests = False

    def first(self, pred: Callable[[dict], bool], timeout: float = WAIT_S) -> dict:
        """The first message since the start matching `pred`, waiting for it (the `until` cursor stays)."""
        return self.seen[self._find(pred, 0, timeout)]

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
        return self._raw.rss_mb()

    def close(self) -> None:
        """shutdown + exit, or a kill when that fails (a test already failed then: its own error says why)."""
        self._raw.close(timeout=10)


def pos(line: int, character: int) -> dict:
    return {"line": line, "character": character}


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> Path:
    from engine.testing.tiny import build_tiny_checkpoint

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
