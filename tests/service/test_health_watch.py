"""The service backend's health watcher: one late /health answer (a busy machine) does not turn the backend to
"not answering" and refuse fills; a second late one in a row does, and a refused connection (a service that is gone)
does at once."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import httpx

from dg_lsp.backends.remote import RemoteState
from dg_lsp.backends.service import ServiceBackend

OK = {"state": "ready", "checkpoint": "c1"}


class Script:
    """An httpx-like client answering /health from a script: "late", "gone" or "ok"."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)

    def get(self, path: str) -> httpx.Response:
        step = self.script.pop(0)
        request = httpx.Request("GET", f"http://dg-engine{path}")
        if step == "late":
            raise httpx.ReadTimeout("timed out", request=request)
        if step == "gone":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=OK, request=request)

    def close(self) -> None:
        pass


class Rounds:
    """A stand-in for the watcher's stop event: lets `n` rounds run, then stops."""

    def __init__(self, n: int) -> None:
        self.n = n

    def wait(self, timeout: float) -> bool:
        self.n -= 1
        return self.n < 0


def watch(script: list[str]) -> list[tuple[str, str]]:
    heard: list[tuple[str, str]] = []
    status = RemoteState()
    status.watch_state(lambda state, message: heard.append((state, message)))
    fake = SimpleNamespace(endpoint=SimpleNamespace(client=lambda *a, **k: Script(script)), _headers={},
                           _closed=Rounds(len(script)), status=status, starter=None, manifest={"id": "c1"})
    t = threading.Thread(target=ServiceBackend._watch, args=(fake,))
    t.start()
    t.join(10)
    return heard


def test_one_late_answer_is_not_a_dead_service():
    assert watch(["ok", "late", "ok", "late", "ok"]) == []


def test_two_late_answers_in_a_row_are():
    heard = watch(["ok", "late", "late", "ok"])
    assert [s for s, _ in heard] == ["error", "ready"] and "not answering" in heard[0][1]


def test_a_refused_connection_is_reported_at_once():
    heard = watch(["ok", "gone", "ok"])
    assert [s for s, _ in heard] == ["error", "ready"] and "not answering" in heard[0][1]
