"""Editors sharing one engine service: keystroke -> item through each backend, N editors typing at once, throughput
with 1, 2 and 4 clients, peak memory of every process, and how fast a vanished service shows.

    python -m bench.service [--clients 4] [--model DIR] [--quick]
    python -m bench.service --backend openai [--model DIR] [--quick]      (bench.vllm_standin)

Phases (one `dg-lsp serve-engine` on a private Unix socket; real `python -m dg_lsp` processes over stdio):
1. and 2. keystroke -> item with one client: a server with the model in process (embedded) and one with
   `backend: "service"`, side by side, taking turns spot by spot; keystrokes replayed one at a time (each waits
   for its answer; the default 75 ms debounce and the checkpoint's steps), as in bench.lsp_latency;
3. N editors typing at once into their own documents: bursts of keystrokes 60-140 ms apart, a 1.5-3 s pause
   after each burst; every keystroke sends didChange and an inline request and cancels the editor's previous
   request ($/cancelRequest, as VS Code does). Every request must get exactly one answer (an item, null, or the
   cancellation error); keystroke -> item counts requests that returned an item. The service reports how many
   denoising steps any canvas ran after its cancel (a superseded canvas holds nobody up for longer than that);
4. throughput: 1, 2 and 4 HTTP clients sending fills back to back (the engine has no batched path: `Engine.stream`
   denoises one (1, C) canvas per context, so fills run one after another and throughput stays flat);
5. the service killed under the N servers: time until each sends dg/status "error".
Peak RSS is each process's VmHWM. Fixed seeds; warm-up requests excluded. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from lsprotocol import types as T

from bench.common import emit, median, percentile, pick_model
from bench.launch import Client, pick_file, places, replay, start_lsp, stop
from bench.service_loop import start as start_service

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(pid: int) -> float | None:
    """Peak resident memory (VmHWM) of a live process, in MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def health(sock: Path) -> dict | None:
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=5) as h:
            return h.get("http://dg-engine/health").json()
    except (httpx.HTTPError, ValueError):
        return None


def open_copy(client: Client, file: Path, text: str, name: str) -> str:
    uri = (file.parent / f"{name}-{file.name}").as_uri()  # a URI of its own; never written to disk
    client.versions[uri] = 1
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri=uri, language_id="python",
                                                                                 version=1, text=text)))
    return uri


async def paired(inits: list[dict], file: Path, text: str, n: int, keys: int) -> list[tuple[list[dict], float]]:
    """Phases 1 and 2: keystroke -> item of replayed typing, each keystroke waiting for its answer, for each server
    in `inits`. The servers run side by side and take turns, spot by spot (in alternating order), so a busy shared
    machine slows them alike. Returns each server's rows (bench.launch.replay) and peak RSS."""
    clients = [await start_lsp(init) for init in inits]
    uris = [open_copy(c, file, text, f"replay{i}") for i, c in enumerate(clients)]
    spots = places(text, n + 2, keys, seed=3)
    rows: list[list[dict]] = [[] for _ in clients]
    for k, spot in enumerate(spots):
        order = list(range(len(clients)))
        if k % 2:
            order.reverse()
        for i in order:
            done = await replay(clients[i], uris[i], text, [spot])
            if k >= 2:  # the first two spots are warm-up
                rows[i] += done
    peaks = [rss_mb(c._server.pid) for c in clients]
    for c in clients:
        await stop(c)
    return list(zip(rows, peaks, strict=True))


async def typing(client: Client, uri: str, text: str, spots: list[tuple[int, str]], seed: int) -> list[dict]:
    """Phase 3 for one editor: bursts with pauses, each keystroke cancelling the editor's previous request."""
    rng = random.Random(seed)
    lines = text.split("\n")
    sent: list[dict] = []
    for line_no, tail in spots:
        head = len(lines[line_no]) - len(tail)
        client.type_text(uri, line_no, head, "", end=(line_no, len(lines[line_no])))
        for k, ch in enumerate(tail):
            if sent and not sent[-1]["fut"].done():
                client.protocol.notify(T.CANCEL_REQUEST, T.CancelParams(id=sent[-1]["rid"]))
            t0 = time.perf_counter()
            client.type_text(uri, line_no, head + k, ch)
            rid, fut = client.inline(uri, line_no, head + k + 1)
            req = {"rid": rid, "fut": fut, "t0": t0, "last_in_burst": k == len(tail) - 1}
            fut.add_done_callback(lambda f, req=req: req.setdefault("ms", (time.perf_counter() - req["t0"]) * 1e3))
            sent.append(req)
            await asyncio.sleep(rng.uniform(0.06, 0.14))
        await asyncio.sleep(rng.uniform(1.5, 3.0))
    await asyncio.wait([r["fut"] for r in sent], timeout=60)
    for r in sent:
        fut = r.pop("fut")
        if not fut.done():
            r["outcome"] = "unanswered"
        elif fut.cancelled() or fut.exception() is not None:
            r["outcome"] = "cancelled"
        else:
            res = fut.result()
            r["outcome"] = "item" if res is not None and res.items else "empty"
    return sent


async def throughput(sock: Path, clients: int, seconds: float, canvas: int) -> dict:
    """Phase 4: `clients` HTTP clients sending fills back to back for `seconds`."""
    prompts = [[2, 5, *range(100 + 7 * c, 140 + 7 * c), 3, *range(300, 340), 4] for c in range(clients)]
    done: list[float] = []
    end = time.perf_counter() + seconds

    async def one(c: int) -> None:
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock)), timeout=120) as h:
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                r = await h.post("http://dg-engine/v1/completions", json={
                    "prompt": prompts[c], "max_tokens": canvas, "dg": {"client": f"tp-{c}", "seed": len(done)}})
                r.raise_for_status()
                done.append((time.perf_counter() - t0) * 1e3)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in range(clients)))
    wall = time.perf_counter() - t0
    return {"clients": clients, "fills": len(done), "fills_per_s": round(len(done) / wall, 2),
            "fill_ms_p50": round(median(done), 1), "tokens_per_s": round(len(done) * canvas / wall, 1)}


def pcts(xs: list[float]) -> tuple[float, float]:
    return round(median(xs), 1), round(percentile(xs, 0.95), 1)


async def run(model: Path, label: str, file: Path, clients: int, quick: bool, tmp: Path) -> dict:
    text = file.read_text(encoding="utf-8")
    sock = tmp / "engine.sock"
    n, keys = (1, 3) if quick else (6, 6)
    out: dict[str, Any] = {"model": label, "file": str(file), "clients": clients}

    service = start_service(sock, model)
    init = {"backend": "service", "endpoint": f"unix:{sock}", "autoStart": False}
    pairs = 1 if quick else 10  # spots per server (the machine's noise needs more than the typing phase)
    (embedded, embedded_rss), (one, one_rss) = await paired([{"modelPath": str(model)}, init], file, text, pairs,
                                                            keys)

    editors = await asyncio.gather(*(start_lsp(init) for _ in range(clients)))
    uris = [open_copy(c, file, text, f"editor{i}") for i, c in enumerate(editors)]
    warm = places(text, 1, 3, seed=99)
    await asyncio.gather(*(replay(c, u, text, warm) for c, u in zip(editors, uris, strict=True)))
    before = health(sock)["requests"]
    t0 = time.perf_counter()
    sent = await asyncio.gather(*(typing(c, u, text, places(text, n, keys, seed=10 + i), seed=i)
                                  for i, (c, u) in enumerate(zip(editors, uris, strict=True))))
    typing_s = time.perf_counter() - t0
    reqs = [r for per in sent for r in per]
    items = [r["ms"] for r in reqs if r["outcome"] == "item"]
    after = health(sock)
    lsp_rss = [rss_mb(c._server.pid) for c in editors]

    rates = [await throughput(sock, k, 1.0 if quick else 8.0, 16) for k in ((1, 2) if quick else (1, 2, 4))]
    service_rss = rss_mb(service.pid)

    # phase 5: the service killed under the editors
    marks = [len(c.statuses) for c in editors]
    t_kill = time.perf_counter()
    service.send_signal(signal.SIGKILL)
    service.wait()
    gone: dict[int, float] = {}
    while len(gone) < len(editors) and time.perf_counter() - t_kill < 10:
        for i, (c, m) in enumerate(zip(editors, marks, strict=True)):
            if i not in gone and any(s["state"] == "error" for s in c.statuses[m:]):
                gone[i] = time.perf_counter()
        await asyncio.sleep(0.002)
    if len(gone) < len(editors):
        raise RuntimeError("a server did not report the service gone within 10 s")
    for c in editors:
        await stop(c)

    e_p50, e_p95 = pcts([r["ms"] for r in embedded])
    s_p50, s_p95 = pcts([r["ms"] for r in one])
    outcomes = {k: sum(r["outcome"] == k for r in reqs) for k in ("item", "empty", "cancelled", "unanswered")}
    out.update({
        "embedded_p50_ms": e_p50, "embedded_p95_ms": e_p95, "one_client_service_p50_ms": s_p50,
        "one_client_service_p95_ms": s_p95, "service_vs_embedded_p50": round(s_p50 / e_p50, 3),
        # keystroke -> item minus the engine's own time (in the server, or in the service): what each path adds
        "embedded_overhead_p50_ms": pcts([r["ms"] - r["engine_ms"] for r in embedded])[0],
        "service_overhead_p50_ms": pcts([r["ms"] - r["engine_ms"] for r in one])[0],
        "embedded_engine_p50_ms": pcts([r["engine_ms"] for r in embedded])[0],
        "service_engine_p50_ms": pcts([r["engine_ms"] for r in one])[0],
        "all_clients_p50_ms": pcts(items)[0], "all_clients_p95_ms": pcts(items)[1],
        "requests": len(reqs), "outcomes": outcomes, "unanswered": outcomes["unanswered"],
        "typing_s": round(typing_s, 1), "items_per_s": round(len(items) / typing_s, 2),
        "service_superseded": after["requests"]["superseded"] - before["superseded"],
        "service_cancelled": after["requests"]["cancelled"] - before["cancelled"],
        "service_done": after["requests"]["done"] - before["done"],
        "steps_after_cancel_max": after["steps_after_cancel_max"], "model_loads": after["model_loads"],
        "throughput": rates, "embedded_lsp_rss_mb": embedded_rss, "one_client_lsp_rss_mb": one_rss,
        "lsp_rss_mb": lsp_rss, "lsp_rss_mb_max": max(x for x in lsp_rss if x is not None),
        "service_rss_mb": service_rss,
        "service_gone_status_ms_max": round(max(g - t_kill for g in gone.values()) * 1e3, 1),
    })
    return out


def table(r: dict) -> str:
    rows = [
        ("model", r["model"]), ("file", r["file"]),
        ("keystroke->item, embedded p50 / p95 (ms)", f"{r['embedded_p50_ms']} / {r['embedded_p95_ms']}"),
        ("keystroke->item, service, 1 client", f"{r['one_client_service_p50_ms']} / {r['one_client_service_p95_ms']}"
                                               f" ({r['service_vs_embedded_p50']}x embedded p50)"),
        ("  minus engine time, p50 (ms)", f"embedded {r['embedded_overhead_p50_ms']}, service "
                                          f"{r['service_overhead_p50_ms']} (engine p50 {r['embedded_engine_p50_ms']}"
                                          f" in process, {r['service_engine_p50_ms']} in the service)"),
        (f"{r['clients']} editors typing: keystroke->item", f"{r['all_clients_p50_ms']} / {r['all_clients_p95_ms']}"
                                                            f" over {r['outcomes']['item']} items"),
        ("  requests and their answers", f"{r['requests']}: {r['outcomes']}"),
        ("  at the service", f"{r['service_done']} filled, {r['service_superseded']} superseded in line, "
                             f"{r['service_cancelled']} cancelled; at most {r['steps_after_cancel_max']} step(s) "
                             "after a cancel"),
        ("throughput " + " / ".join(str(t["clients"]) for t in r["throughput"]) + " clients (fills/s)",
         " / ".join(str(t["fills_per_s"]) for t in r["throughput"])
         + "  (no batched path: fills run one after another)"),
        ("peak RSS (MiB)", f"embedded server {r['embedded_lsp_rss_mb']}, service clients {r['lsp_rss_mb']}, "
                           f"service {r['service_rss_mb']}"),
        ("model loads in the service", r["model_loads"]),
        ("service killed -> dg/status error (max ms)", r["service_gone_status_ms_max"]),
    ]
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=None, help="editors typing at once (default 4; --quick: 1)")
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--file", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="a few keystrokes, 1 editor, 1 s of throughput per client "
                    "count (1 and 2): a code-path check for the smoke tests, not a measurement")
    ap.add_argument("--backend", choices=["service", "openai"], default="service",
                    help="openai: the embedded engine beside the openai backend against a vLLM-shaped stand-in "
                         "(bench.vllm_standin: canvas tokens per fill, keystroke latency)")
    args = ap.parse_args(argv)
    if args.backend == "openai":
        from bench import vllm_standin

        return vllm_standin.main([*(["--model", str(args.model)] if args.model else []),
                                  *(["--file", str(args.file)] if args.file else []),
                                  *(["--quick"] if args.quick else [])])
    clients = args.clients or (1 if args.quick else 4)
    with tempfile.TemporaryDirectory(prefix="dgb-") as tmp:
        os.chmod(tmp, 0o700)
        model, label = pick_model(Path(tmp), args.model)
        result = asyncio.run(run(model, label, pick_file(args.file), clients, args.quick, Path(tmp)))
    print(table(result))
    emit(result)
    return result


if __name__ == "__main__":
    main()
