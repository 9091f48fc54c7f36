"""The server's overhead per keystroke with the workspace index on and off, measured over stdio side by side.

Two real server processes, started together with the same model and the same workspace folder (a real project:
by default the standard library, capped at 2,500 files as bench.context's large index): one with context from
other files on (the default crossFileTokens), one with it off (crossFileTokens 0, so no index is built). The same
keystrokes (bench.launch.replay: didChange + inlineCompletion, debounce 0, 4 steps) go to both, alternating
which server goes first at each place in the file. The figure per keystroke is bench.lsp_latency's server overhead:
the server's own time from the didChange's arrival to the answer written, minus the engine's time and the idle wait
for the client's request. The "on" server answers its first keystrokes while its index is still being built (its
state at each keystroke comes back in dg/status `crossFile.index`), so the figures are also split by that state.

Used by `python -m bench.context` (its "overhead_p95_ms") and `python -m bench.lsp_latency --context`.
"""

from __future__ import annotations

import asyncio
import sysconfig
import time
from pathlib import Path

from bench.common import median, percentile
from bench.launch import places
from bench.launch import retype as keystrokes
from bench.launch import start as start_server
from bench.launch import stop as stop_server
from dg_lsp.devtools.client import open_doc
from dg_lsp.trace import STAGES

ROOT = Path(__file__).resolve().parent.parent
STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILE = "email/message.py"  # a file of the workspace whose imports reach other files of it


async def start(model: Path, folder: Path, **settings):
    """A server with `folder` as its workspace folder, initialized with `settings` (beside debounce 0, no
    confidence gate, 4 steps), its model ready: bench.launch's launcher."""
    return await start_server(model, {"debounceMs": 0, "minConfidence": 0, "steps": 4, **settings}, folder)


async def stop(client) -> None:
    await stop_server(client)


def loop_cpu_ms(pid: int) -> float:
    """CPU time the server's main thread (its event loop) has run, from the scheduler's nanosecond counter."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e6


async def retype(client, uri: str, text: str, spot: tuple[int, str]) -> list[dict]:
    """bench.launch.retype at one place: the server's overhead per keystroke, and the loop's CPU time from each
    didChange sent to its answer received (the server's event loop only: the engine runs on its own thread)."""
    pid = client._server.pid
    rows = []
    for key in await keystrokes(client, uri, text, spot, meter=lambda: loop_cpu_ms(pid)):
        stats = key.stats
        rows.append({"ms": stats["respondedMs"] - stats.get("waitMs", 0.0) - stats.get("engineMs", 0.0),
                     "loop_cpu_ms": key.metered, "index": (stats.get("crossFile") or {}).get("index"),
                     "stages": stats.get("stagesMs") or {},
                     "files": len((stats.get("crossFile") or {}).get("files") or ())})
    return rows


async def index_ready(client, uri: str, since_s: float, timeout: float = 300.0) -> float | None:
    """Ask (an inline request at the top of the file) until the index says ready; seconds since the start."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        _, fut = client.inline(uri, 0, 0)
        await fut
        await asyncio.sleep(0.5)
        last = next((s["request"] for s in reversed(client.statuses) if "crossFile" in s.get("request", {})), None)
        if last is not None and (last["crossFile"]["index"] or {}).get("state") == "ready":
            return round(since_s + time.perf_counter() - t0, 1)
    return None


def p(xs: list[float]) -> dict:
    return {"p50": round(median(xs), 3), "p95": round(percentile(xs, 0.95), 3), "n": len(xs)}


async def measure(model: Path, folder: Path, file: Path, spots_n: int, keys: int, max_files: int) -> dict:
    text = file.read_text(encoding="utf-8")
    uri = file.resolve().as_uri()
    t0 = time.perf_counter()
    on, off = await asyncio.gather(start(model, folder, indexMaxFiles=max_files),
                                   start(model, folder, indexMaxFiles=max_files, crossFileTokens=0))
    loaded_s = time.perf_counter() - t0
    rows: dict[str, list[dict]] = {"on": [], "off": []}
    ready_after_s = None
    try:
        for client in (on, off):
            open_doc(client, uri, text)
        spots = places(text, spots_n + 2, keys)
        for client in (on, off):  # warm-up: imports, allocator, first engine call
            for spot in spots[:2]:
                await retype(client, uri, text, spot)
        half = 2 + spots_n // 2
        for phase, part in (("building", spots[2:half]), ("ready", spots[half:])):
            if phase == "ready":
                ready_after_s = await index_ready(on, uri, time.perf_counter() - t0)
            for i, spot in enumerate(part):
                order = (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on))
                for name, client in order:
                    rows[name] += [dict(r, phase=phase) for r in await retype(client, uri, text, spot)]
    finally:
        await asyncio.gather(stop(on), stop(off))
    assert all(r["index"] is None for r in rows["off"]), "the off server built an index"
    assert any(r["files"] for r in rows["on"]), "no prompt of the on server took context from another file"
    wall = {k: [r["ms"] for r in v] for k, v in rows.items()}
    cpu = {k: [r["loop_cpu_ms"] for r in v] for k, v in rows.items()}
    by = lambda k, ph, f="ms": [r[f] for r in rows[k] if r["phase"] == ph]  # noqa: E731
    return {"overhead_p95_ms": {"on": p(wall["on"])["p95"], "off": p(wall["off"])["p95"]},
            "on": p(wall["on"]), "off": p(wall["off"]),
            "while_building": {"on": p(by("on", "building")), "off": p(by("off", "building"))},
            "index_ready": {"on": p(by("on", "ready")), "off": p(by("off", "ready"))},
            "on_index_states": sorted({(r["index"] or {}).get("state") or "-" for r in rows["on"]}),
            "index_ready_after_s": ready_after_s,
            "loop_cpu_ms": {"on": p(cpu["on"]), "off": p(cpu["off"])},
            "loop_cpu_ms_building": {k: p(by(k, "building", "loop_cpu_ms")) for k in rows},
            "loop_cpu_ms_ready": {k: p(by(k, "ready", "loop_cpu_ms")) for k in rows},
            "stages_p50_ms": {k: {st: round(median([r["stages"].get(st, 0.0) for r in v]), 3) for st in STAGES}
                              for k, v in rows.items()},
            "with_context_share": round(sum(bool(r["files"]) for r in rows["on"]) / max(len(rows["on"]), 1), 3),
            "index_files": max(((r["index"] or {}).get("files") or 0) for r in rows["on"]),
            "keystrokes_each": len(rows["on"]), "folder": str(folder), "file": str(file),
            "load_s": round(loaded_s, 1)}


def run(model: Path, folder: Path = STDLIB, file: Path | None = None, quick: bool = False,
        max_files: int = 2500) -> dict:
    file = file or STDLIB / FILE
    spots_n, keys = (4, 5) if quick else (24, 8)
    return asyncio.run(measure(model, folder, file, spots_n, keys, 300 if quick else max_files))
