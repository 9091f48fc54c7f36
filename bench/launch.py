"""The benchmarks' one launcher of language servers, and their one typing loop: a pygls client over stdio.

`start`/`stop` a `python -m dg_lsp` process (`start_lsp`: on the model its settings name, no confidence gate, one
torch thread), `places` to type at in a file, `retype` one place keystroke by keystroke and `replay` several, reading
each request's dg/status figures. Used by bench.lsp_latency, bench.context_overhead, bench.next_edit, bench.service
and bench.vllm_standin; it imports no benchmark (bench.common only), so none of them imports another to get it.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

from bench.common import checkout_env
from dg_lsp.devtools.client import configure, edit_doc, inline_params, record, request_stats


def pick_file(path: Path | None = None) -> Path:
    """The standard-library module closest to 5,000 lines among a few large, stable ones."""
    if path is not None:
        return path
    lib = Path(sysconfig.get_paths()["stdlib"])
    found = [p for p in (lib / n for n in ("tkinter/__init__.py", "_pydecimal.py", "turtle.py", "typing.py",
                                           "inspect.py")) if p.is_file()]
    return min(found, key=lambda p: abs(p.read_text(encoding="utf-8").count("\n") - 5000))


class Client(LanguageClient):
    """A pygls client recorded by dg_lsp.devtools.client (dg/status and dg/draft as dicts, applyEdit accepted), with the
    replay's two actions: type into a document, ask for an inline item."""

    def __init__(self) -> None:
        super().__init__("dg-lsp-bench", "1")
        record(self)
        self._ids = itertools.count(1)

        @self.feature(T.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def progress_create(params: Any) -> None:
            return None

        for method in (T.PROGRESS, T.WINDOW_SHOW_MESSAGE, T.WINDOW_LOG_MESSAGE):
            self.feature(method)(lambda params: None)

    def request_stats(self, rid: str) -> dict | None:
        return request_stats(self, rid)

    def configure(self, **settings: Any) -> None:
        configure(self, **settings)

    def type_text(self, uri: str, line: int, char: int, text: str, end: tuple[int, int] | None = None) -> None:
        edit_doc(self, uri, line, char, text, end)

    def inline(self, uri: str, line: int, char: int) -> tuple[str, asyncio.Future]:
        rid = f"bench-{next(self._ids)}"
        return rid, asyncio.ensure_future(self.protocol.send_request_async(
            T.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(uri, line, char), rid))


async def start(model: Path | None, settings: dict, folder: Path | None = None,
                env: dict[str, str] | None = None) -> Client:
    """The benchmarks' one launcher: `python -m dg_lsp [--model DIR]` over stdio (env: `env`, default this
    checkout's, offline), initialized with `settings` as its initializationOptions and `folder` as its workspace
    folder, its model ready. `client.init_result` is the InitializeResult."""
    client = Client()
    await client.start_io(sys.executable, "-m", "dg_lsp", *(["--model", str(model)] if model else []),
                          env=env or checkout_env())
    client.init_result = await client.initialize_async(T.InitializeParams(
        capabilities=T.ClientCapabilities(window=T.WindowClientCapabilities(work_done_progress=True)),
        workspace_folders=[T.WorkspaceFolder(uri=folder.resolve().as_uri(), name=folder.name)] if folder else None,
        initialization_options=settings))
    client.initialized(T.InitializedParams())
    await wait_for(lambda: any(s["state"] in ("ready", "error") for s in client.statuses), 300)
    if client.statuses[-1]["state"] != "ready":
        raise RuntimeError(f"the model failed to load: {client.statuses[-1].get('message')}")
    return client


async def stop(client: Client) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


async def wait_for(pred, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        if time.monotonic() > deadline:
            raise TimeoutError("server did not answer in time")
        await asyncio.sleep(0.002)
    return value


def places(text: str, n: int, keys: int, seed: int = 0) -> list[tuple[int, str]]:
    """`n` code lines (line number, the last `keys` characters to retype), spread over the file."""
    lines = text.split("\n")
    ok = [i for i, ln in enumerate(lines) if len(ln.strip()) > keys + 8 and not ln.strip().startswith(("#", '"'))]
    rng = random.Random(seed)
    return [(i, lines[i][-keys:]) for i in sorted(rng.sample(ok, n))]


@dataclass
class Keystroke:
    """One retyped character: its index in the spot's tail, the inline answer, keystroke -> answer (ms), the request's
    dg/status body, and what `meter` moved over the keystroke (None without one)."""

    k: int
    answer: Any
    ms: float
    stats: dict
    metered: float | None


async def retype(client: Client, uri: str, text: str, spot: tuple[int, str],
                 meter: Callable[[], float] | None = None) -> list[Keystroke]:
    """At one spot (line number, the line's last characters): delete those characters (untimed), then retype them one
    keystroke at a time, each followed by an inline request answered before the next. The benchmarks' one typing
    loop (bench.context_overhead, bench.vllm_standin and `replay` read what they need from it)."""
    line_no, tail = spot
    line = text.split("\n")[line_no]
    head = len(line) - len(tail)
    client.type_text(uri, line_no, head, "", end=(line_no, len(line)))
    out = []
    for k, ch in enumerate(tail):
        before = meter() if meter is not None else 0.0
        t0 = time.perf_counter()
        client.type_text(uri, line_no, head + k, ch)
        rid, fut = client.inline(uri, line_no, head + k + 1)
        res = await fut
        ms = (time.perf_counter() - t0) * 1e3
        metered = meter() - before if meter is not None else None
        stats = await wait_for(lambda rid=rid: client.request_stats(rid), 10)  # sent after the answer
        out.append(Keystroke(k, res, ms, stats, metered))
    return out


async def replay(client: Client, uri: str, text: str, spots: list[tuple[int, str]],
                 verbose: bool = False) -> list[dict]:
    """`retype` at each spot; the server's figures of each keystroke (dg/status) beside its round trip."""
    rows = []
    for spot in spots:
        for key in await retype(client, uri, text, spot):
            stats = key.stats
            rows.append({"ms": key.ms, "first": key.k == 0, "item": bool(key.answer and key.answer.items),
                         "responded_ms": stats.get("respondedMs"),
                         "engine_wall_ms": stats.get("engineWallMs"),
                         "wait_ms": stats.get("waitMs", 0.0), "write_ms": stats.get("writeMs", 0.0),
                         "stages": stats.get("stagesMs"),
                         "tree_fresh": stats.get("treeFresh"),
                         "engine_ms": stats.get("engineMs", 0.0), "server_ms": stats.get("serverMs"),
                         "reused": stats.get("reusedPrefixTokens", 0), "cached": stats.get("cached"),
                         "canvas_ms": stats.get("canvasMs"), "post_ms": stats.get("postMs"),
                         "index": (stats.get("crossFile") or {}).get("index")})
            if verbose:
                print(rows[-1], file=sys.stderr)
    return rows


def child_env() -> dict[str, str]:
    """A server's or service's environment in the multi-process benchmarks: this checkout's, one torch thread."""
    return checkout_env(OMP_NUM_THREADS="1")


async def start_lsp(init: dict) -> Client:
    """`start` on the model the settings `init` name (no confidence gate), with `child_env`."""
    return await start(None, {"minConfidence": 0, **init}, env=child_env())
