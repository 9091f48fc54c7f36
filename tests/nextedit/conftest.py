"""Fixtures for tests/nextedit: the real server over a raw pipe (tests/reliability's RawServer) on the tiny random
checkpoint, on the shipped model, or on a scripted backend (scripted_server.py) whose "model" rewrites the window by
fixed rules, so a test knows the proposal it should get."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.conftest import RawServer, start_server, tiny_ckpt  # noqa: F401 -- fixtures

SCRIPTED = Path(__file__).with_name("scripted_server.py")


class ScriptedServer(RawServer):
    """RawServer on scripted_server.py: `rules` are (old, new) replacements the backend makes in the window."""

    def __init__(self, rules: list[tuple[str, str]], confidence: float = 0.99, delay: float = 0.0,
                 from_history: bool = False) -> None:
        super().__init__(None, f"--confidence={confidence}", f"--delay={delay}",
                         *(["--from-history"] if from_history else []), *(f"{a}=>{b}" for a, b in rules),
                         command=[sys.executable, str(SCRIPTED)])


@pytest.fixture
def servers(start_server) -> Any:  # noqa: F811 -- start_server: the fixture imported above
    """`servers.raw(model, options)` (tests/reliability's `start_server`, on the shipped model unless `model`) /
    `servers.scripted(rules, options)`: fresh servers, closed after the test."""
    started: list[RawServer] = []

    class Start:
        @staticmethod
        def raw(model: Path | None = None, options: dict | None = None) -> RawServer:
            from dg_lsp.backends.checkpoint import default_model_dir

            return start_server(options, model or default_model_dir())

        @staticmethod
        def scripted(rules: list[tuple[str, str]], options: dict | None = None, confidence: float = 0.99,
                     delay: float = 0.0, from_history: bool = False) -> ScriptedServer:
            srv = ScriptedServer(rules, confidence, delay, from_history)
            started.append(srv)
            srv.init_result = srv.initialize(options)
            return srv

    yield Start
    for srv in started:
        srv.close()


def ask(srv: RawServer, uri: str, line: int, character: int, version: int | None = None) -> tuple[int, dict]:
    """A copilotInlineEdit request (not sent) at (line, character) for `version` (default: the current one)."""
    doc = {"uri": uri, "version": srv.versions[uri] if version is None else version}
    return srv.request("textDocument/copilotInlineEdit", {"textDocument": doc, "position": {
        "line": line, "character": character}, "context": {"triggerKind": 2}})


def apply(text: str, edits: list[dict]) -> str:
    """The text with the proposal's edits applied (ASCII text, one line per \\n)."""
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)

    def off(p: dict) -> int:
        return starts[p["line"]] + p["character"]

    for e in sorted(edits, key=lambda e: off(e["range"]["start"]), reverse=True):
        text = text[:off(e["range"]["start"])] + e["text"] + text[off(e["range"]["end"]):]
    return text
