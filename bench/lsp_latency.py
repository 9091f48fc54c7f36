"""Editor latency through the real server over stdio: typing replayed on a ~5,000-line standard-library file.

    python -m bench.lsp_latency [--model DIR] [--file PATH] [--quick] [--verbose] [--context [FOLDER]]

Three measurements, one server process, a pygls client speaking LSP over the server's stdin/stdout:
1. server overhead: for each keystroke (didChange + textDocument/inlineCompletion, debounce 0), the server's
   own time from the arrival of the didChange to the answer written on stdout (`respondedMs` in dg/status)
   minus the engine's time (`engineMs`). That is everything the server adds: incremental sync and re-parse,
   snapshot, context, canvas (tokenizing the budgeted prefix/suffix), caches, post-processing, thread hand-offs,
   JSON in and out. Beside it, the client's round trip minus the engine's time, which also holds this Python
   client's own work (serializing, reading pipes, parsing the answer). The handler part alone is `serverMs`.
   Also: the round trip of keystrokes that type the shown fill (answered from the typed-ahead cache: the
   server's whole per-keystroke cost with no model and no canvas).
2. keystroke-to-item latency with the server's default settings (debounce 75 ms included, the checkpoint's
   default steps): the first keystroke at a new place in the file is "cold" (nothing in the engine's prefix KV
   cache matches); the following ones at the same place reuse the KV cache of the common token prefix.
3. steps after a cancel: a fill is started (drafts on), and at its first dg/draft it is stopped by
   $/cancelRequest or by a newer keystroke; the server reports how many denoising steps ran after the cancel.

Without --model: the shipped default model if present, else a random checkpoint of the default model's shape
(BENCH_SHAPE) with the tiny test tokenizer, clearly labelled. Warm-up requests are excluded. Fixed seed. The last
line is JSON (server_overhead_ms_p95, e2e_ms_p50, e2e_ms_p95, steps_after_cancel_max, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from lsprotocol import types as T

from bench import context_overhead
from bench.common import emit, median, percentile, pick_model
from bench.launch import Client, pick_file, places, replay, start, stop, wait_for
from dg_lsp.devtools.client import open_doc
from dg_lsp.trace import STAGES

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"server_overhead_ms_p95": 5.0, "e2e_ms_p50": 300.0, "steps_after_cancel_max": 1}


async def accept_typing(client: Client, uri: str, text: str, spots: list[tuple[int, str]]) -> list[float]:
    """The user types the characters of the shown fill: each keystroke's item comes from the typed-ahead
    cache, so its round trip is the server's whole per-keystroke cost with no model and no canvas."""
    lines = text.split("\n")
    out = []
    for line_no, _ in spots:
        col = len(lines[line_no])
        rid, fut = client.inline(uri, line_no, col)
        res = await fut
        shown = res.items[0].insert_text if res and res.items else ""
        shown = shown.split("\n")[0][:6]
        for k in range(len(shown) - 1):
            t0 = time.perf_counter()
            client.type_text(uri, line_no, col + k, shown[k])
            rid, fut = client.inline(uri, line_no, col + k + 1)
            await fut
            ms = (time.perf_counter() - t0) * 1e3
            stats = await wait_for(lambda rid=rid: client.request_stats(rid), 10)
            if stats.get("cached") == "typed-ahead":
                out.append(ms)
        if len(shown) > 1:  # leave the file as it was (a model's fill may open a quote for the rest of the file)
            client.type_text(uri, line_no, col, "", end=(line_no, col + len(shown) - 1))
    return out


async def cancels(client: Client, uri: str, text: str, trials: int) -> list[int]:
    """Start a fill, stop it at its first draft (alternately $/cancelRequest and a keystroke), read the count."""
    lines = text.split("\n")
    out = []
    for i, (line_no, _) in enumerate(places(text, trials, 4, seed=1)):
        col = len(lines[line_no])
        rid, fut = client.inline(uri, line_no, col)
        await wait_for(lambda rid=rid: any(d["requestId"] == rid for d in client.drafts))
        if i % 2 == 0:
            client.protocol.notify(T.CANCEL_REQUEST, T.CancelParams(id=rid))
        else:
            client.type_text(uri, line_no, col, " ")
            client.type_text(uri, line_no, col, "", end=(line_no, col + 1))
        try:
            await fut
        except Exception:  # the cancelled request's error response
            pass
        stats = await wait_for(lambda rid=rid: client.request_stats(rid))
        if stats["stepsAfterCancel"] is not None:
            out.append(stats["stepsAfterCancel"])
    return out


def pcts(xs: list[float]) -> tuple[float, float]:
    return round(median(xs), 2), round(percentile(xs, 0.95), 2)


async def run(model: Path, label: str, file: Path, quick: bool, verbose: bool) -> dict:
    text = file.read_text(encoding="utf-8")
    t0 = time.perf_counter()
    # minConfidence 0: latency of every answer, and typed-ahead needs shown items (the shipped model's gate of 0.90
    # withholds ~70% of fills after computing them, so it does not change the timings measured here)
    client = await start(model, {"debounceMs": 0, "minConfidence": 0})
    load_s = time.perf_counter() - t0
    uri = file.resolve().as_uri()
    open_doc(client, uri, text)

    n, keys = (2, 3) if quick else (12, 8)  # quick: a code-path check (every phase runs), not a measurement
    spots = places(text, 2 * n + 2, keys)
    # Overhead: few denoising steps (the engine's time is subtracted anyway; this only saves bench time).
    client.configure(steps=4)
    await replay(client, uri, text, spots[:2])  # warm-up: imports, allocator, first engine call
    overhead = await replay(client, uri, text, spots[2:n + 2], verbose)
    accepted = await accept_typing(client, uri, text, places(text, n, 4, seed=2))
    client.configure(debounceMs=75, steps=None)  # the defaults: keystroke-to-item as a user sees it
    e2e = await replay(client, uri, text, spots[n + 2:], verbose)
    client.configure(debounceMs=0, drafts=True, steps=64)
    after_cancel = await cancels(client, uri, text, 4 if quick else 10)
    await stop(client)

    over = [r["responded_ms"] - r["wait_ms"] - r["engine_ms"] for r in overhead]
    window = [r["responded_ms"] + r["write_ms"] - r["engine_ms"] for r in overhead]
    trip = [r["ms"] - r["engine_ms"] for r in overhead]
    over_pre = [x - (r["post_ms"] or 0.0) for x, r in zip(over, overhead, strict=True)]
    handler = [r["server_ms"] for r in overhead if r["server_ms"] is not None]
    canvas = [r["canvas_ms"] for r in overhead if r["canvas_ms"] is not None]
    post = [r["post_ms"] for r in overhead if r["post_ms"] is not None]
    cold = [r["ms"] for r in e2e if r["first"]]
    warm = [r["ms"] for r in e2e if not r["first"]]
    out = {
        "model": label, "model_path": str(model), "file": str(file), "lines": text.count("\n"),
        "load_s": round(load_s, 2), "keystrokes": len(overhead) + len(e2e), "debounce_ms": 75,
        "server_overhead_ms_p50": pcts(over)[0], "server_overhead_ms_p95": pcts(over)[1],
        "window_ms_p50": pcts(window)[0], "window_ms_p95": pcts(window)[1],
        "client_wait_ms_p50": pcts([r["wait_ms"] for r in overhead])[0],
        "write_ms_p50": pcts([r["write_ms"] for r in overhead])[0],
        "round_trip_overhead_ms_p50": pcts(trip)[0], "round_trip_overhead_ms_p95": pcts(trip)[1],
        "overhead_without_postprocess_ms_p50": pcts(over_pre)[0],
        "overhead_without_postprocess_ms_p95": pcts(over_pre)[1],
        "handler_ms_p50": pcts(handler)[0], "handler_ms_p95": pcts(handler)[1],
        "stale_tree_share": round(sum(r["tree_fresh"] is False for r in overhead) / max(len(overhead), 1), 3),
        "stale_tree_share_e2e": round(sum(r["tree_fresh"] is False for r in e2e) / max(len(e2e), 1), 3),
        "typed_ahead_ms_p50": pcts(accepted)[0], "typed_ahead_ms_p95": pcts(accepted)[1],
        "typed_ahead_keystrokes": len(accepted),
        "canvas_ms_p50": pcts(canvas)[0], "canvas_ms_p95": pcts(canvas)[1],
        "postprocess_ms_p50": pcts(post)[0], "postprocess_ms_p95": pcts(post)[1],
        "e2e_ms_p50": pcts([r["ms"] for r in e2e])[0], "e2e_ms_p95": pcts([r["ms"] for r in e2e])[1],
        "e2e_cold_ms_p50": pcts(cold)[0], "e2e_cold_ms_p95": pcts(cold)[1],
        "e2e_prefix_cache_ms_p50": pcts(warm)[0], "e2e_prefix_cache_ms_p95": pcts(warm)[1],
        "engine_ms_p50": pcts([r["engine_ms"] for r in e2e])[0],
        "reused_prefix_tokens_p50": median([r["reused"] for r in e2e if not r["first"]]),
        "items_shown": sum(r["item"] for r in e2e), "steps_after_cancel": after_cancel,
        "steps_after_cancel_max": max(after_cancel) if after_cancel else None,
        "quick": quick,
    }
    names = [k for k in STAGES if any(r["stages"] and k in r["stages"] for r in overhead)]
    out["stages_ms"] = {k: pcts([r["stages"].get(k, 0.0) for r in overhead if r["stages"]]) for k in names}
    out["targets_met"] = {k: out[k] is not None and out[k] <= v for k, v in TARGETS.items()}
    return out


def table(r: dict) -> str:
    rows = [
        ("file", f"{r['file']} ({r['lines']} lines)"), ("model", r["model"]),
        ("keystrokes", r["keystrokes"]),
        ("server overhead p50 / p95 (ms)", f"{r['server_overhead_ms_p50']} / {r['server_overhead_ms_p95']}"
                                           " (server-side: didChange in -> answer handed to the OS, minus engine"
                                           " and minus the server's idle wait for the client's request)"),
        ("  didChange in -> write returned", f"{r['window_ms_p50']} / {r['window_ms_p95']} (minus engine; holds the"
                                             f" idle wait, p50 {r['client_wait_ms_p50']}, and the client run on our"
                                             f" CPU during the write, p50 {r['write_ms_p50']})"),
        ("  client round trip minus engine", f"{r['round_trip_overhead_ms_p50']} / "
                                             f"{r['round_trip_overhead_ms_p95']} (adds this Python client)"),
        ("  without post-processing p50 / p95", f"{r['overhead_without_postprocess_ms_p50']} / "
                                                f"{r['overhead_without_postprocess_ms_p95']}"),
        ("  handler only p50 / p95 (ms)", f"{r['handler_ms_p50']} / {r['handler_ms_p95']}"),
        ("  answered from a stale tree", f"{100 * r['stale_tree_share']:.0f}% of these back-to-back keystrokes "
                                         "(the reparse waits for idle time); with the 75 ms debounce: "
                                         f"{100 * r['stale_tree_share_e2e']:.0f}%"),
        ("  stages p50 / p95 (ms)", "  ".join(f"{k} {a}/{b}" for k, (a, b) in r["stages_ms"].items())),
        ("typed-ahead round trip p50 / p95 (ms)", f"{r['typed_ahead_ms_p50']} / {r['typed_ahead_ms_p95']}"
                                                  f" ({r['typed_ahead_keystrokes']} keystrokes, no model)"),
        ("keystroke->item p50 / p95 (ms)", f"{r['e2e_ms_p50']} / {r['e2e_ms_p95']} (debounce 75 ms included)"),
        ("  cold p50 / p95 (ms)", f"{r['e2e_cold_ms_p50']} / {r['e2e_cold_ms_p95']}"),
        ("  prefix cache p50 / p95 (ms)", f"{r['e2e_prefix_cache_ms_p50']} / {r['e2e_prefix_cache_ms_p95']}"
                                          f" (reused tokens p50 {r['reused_prefix_tokens_p50']})"),
        ("  engine time p50 (ms)", r["engine_ms_p50"]),
        ("steps after a cancel (max)", f"{r['steps_after_cancel_max']} of {r['steps_after_cancel']}"),
        ("targets met", r["targets_met"]),
    ]
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="checkpoint dir (default: shipped model, else random)")
    ap.add_argument("--file", type=Path, default=None, help="source file to type into (default: a stdlib module)")
    ap.add_argument("--quick", action="store_true", help="fewer keystrokes (seconds), for smoke tests")
    ap.add_argument("--verbose", action="store_true", help="print every keystroke's figures to stderr")
    ap.add_argument("--context", type=Path, nargs="?", const=context_overhead.STDLIB, default=None, metavar="FOLDER",
                    help="only the overhead with the workspace index on vs off, two servers side by side with FOLDER "
                         "as their workspace (default: the standard library); see bench.context_overhead")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model, label = pick_model(Path(tmp), args.model, tokenizer=True)
        if args.context is not None:
            result = {"model": label, **context_overhead.run(model, args.context, args.file, args.quick)}
            emit(result)
            return result
        result = asyncio.run(run(model, label, pick_file(args.file), args.quick, args.verbose))
    print(table(result))
    emit(result)
    return result


if __name__ == "__main__":
    main()
