"""Canvas tokens denoised per fill and keystroke latency: the embedded engine beside the `openai` backend against a
vLLM-shaped stand-in, before (a plain OpenAI request) and after (vLLM's per-request `vllm_xargs`).

    python -m bench.vllm_standin [--model DIR] [--file PATH] [--quick]      (also: python -m bench.service
                                                                             --backend openai)
    python -m bench.vllm_standin --serve --port PORT [--model DIR]           (the stand-in alone)

The stand-in answers as vLLM 0.33 serving DiffusionGemma does as far as dg-lsp meets it (`/v1/models` with
`owned_by: "vllm"`, `/version`, streamed `/v1/completions` with token-id prompts) and denoises with the project's
own engine, doing what vLLM does with a request (REFERENCE.md §7): every canvas is the served one
(`--diffusion-config canvas_length`: here the checkpoint's largest canvas) and runs at most the served step cap,
unless `vllm_xargs` gives `diffusion_canvas_length` (at most the served canvas) and `diffusion_max_steps` (clamped
to the cap); canvases follow one another until an end token or `max_tokens`, and the text is cut at `max_tokens`
(`finish_reason: "length"`). Two simplifications: the whole answer streams as one event, and the engine's
temperature schedule spans the request's steps (vLLM's spans the served cap). It counts, per request, the canvas
positions it denoised (canvas width x canvases) and width x steps (the work a GPU pays), at `GET /standin/stats`.

Three real `dg-lsp` servers over stdio take turns spot by spot (alternating order; each keystroke waits for its
answer, debounce 75 ms, the checkpoint's steps): embedded; `openai` with `openaiDiffusion: "off"` (before: what
dg-lsp sent until now); `openai` with vLLM detected (after). The embedded engine's canvas per fill is dg/status's
`canvasLength` (keystroke holes take one canvas); fills answered from a cache are not counted. Last line: JSON with
`"canvas_tokens_per_fill": {"embedded": a, "openai": b}` (b: after), the before figures and the latency figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from lsprotocol import types as T

from bench.common import emit, median, percentile, pick_model
from bench.launch import Client, child_env, pick_file, places, start_lsp, stop
from bench.launch import retype as keystrokes

ROOT = Path(__file__).resolve().parent.parent
MODEL_ID = "google/diffusiongemma-26B-A4B-it"  # what the stand-in calls its model (any id works)


# -- the stand-in ---------------------------------------------------------------------------------------------------

def serve(model: Path | None, port: int) -> None:
    """Run the stand-in on 127.0.0.1:`port` until killed (the engine loads before the port answers)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    from engine.engine import Engine

    engine = Engine.from_pretrained(model, device="cpu", dtype="float32")
    served = max(engine.prompt_format.canvas_lengths)
    cap = engine.settings().steps
    lock = threading.Lock()  # one canvas at a time, as one engine
    log: list[dict[str, Any]] = []

    def run(body: dict[str, Any], cancel: Any) -> dict[str, Any]:
        xargs = body.get("vllm_xargs") or {}
        width = min(int(xargs.get("diffusion_canvas_length") or served), served)
        steps = max(1, min(int(xargs.get("diffusion_max_steps") or cap), cap))
        max_tokens = int(body.get("max_tokens") or 16)
        with lock:
            res = engine.infill(list(body["prompt"]), canvas_length=width, steps=steps,
                                max_canvases=math.ceil(max_tokens / width), cancel=cancel)
        ids = res.ids[:max_tokens]
        unfinished = len(res.ids) > max_tokens or len(res.ids) == width * res.canvases  # no end token in it
        row = {"width": width, "steps_cap": steps, "canvases": res.canvases, "steps": res.steps,
               "canvas_tokens": width * res.canvases, "canvas_token_steps": width * res.steps,
               "cancelled": res.cancelled, "xargs": bool(xargs)}
        log.append(row)
        return {"text": engine.decode(ids), "finish": "length" if unfinished else "stop", **row}

    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0,
                                                         "owned_by": "vllm", "root": MODEL_ID, "parent": None,
                                                         "max_model_len": 32768, "permission": []}]})

    async def completions(request: Request):
        from engine.seam import CancelToken

        body = await request.json()
        token = CancelToken()
        job = asyncio.ensure_future(asyncio.to_thread(run, body, token))
        while not job.done():  # a client that hangs up aborts its request, as vLLM does
            if await request.is_disconnected():
                token.cancel()
            await asyncio.wait([job], timeout=0.01)
        out = job.result()

        async def events():
            head = {"id": "cmpl-standin", "object": "text_completion", "created": 0, "model": MODEL_ID}
            for text, finish in ((out["text"], None), ("", out["finish"])):
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
                yield f"data: {json.dumps({**head, 'choices': [choice]})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def stats(request: Request):
        return JSONResponse({"served_canvas": served, "step_cap": cap, "requests": log})

    app = Starlette(routes=[Route("/v1/models", models),
                            Route("/version", lambda request: JSONResponse({"version": "0.33.0 (dg-lsp stand-in)"})),
                            Route("/v1/completions", completions, methods=["POST"]),
                            Route("/standin/stats", stats)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def start_standin(model: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "bench.vllm_standin", "--serve", "--port", str(port),
                             "--model", str(model)], env=child_env(), stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"{url}/standin/stats", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the vLLM stand-in did not start")
        time.sleep(0.1)


def standin_log(url: str) -> list[dict]:
    return httpx.get(f"{url}/standin/stats", timeout=10).json()["requests"]


# -- the measurement ------------------------------------------------------------------------------------------------

async def retype(client: Client, uri: str, text: str, spot: tuple[int, str]) -> list[dict]:
    """bench.launch.retype at one spot: keystroke -> answer and what the request's dg/status says ran."""
    rows = []
    for key in await keystrokes(client, uri, text, spot):
        stats = key.stats
        rows.append({"ms": key.ms, "item": bool(key.answer and key.answer.items), "cached": stats.get("cached"),
                     "engine_ran": not stats.get("cached") and stats.get("steps", 0) > 0,
                     "canvas": stats.get("canvasLength"), "steps": stats.get("steps", 0),
                     "reason": stats.get("reason")})
    return rows


def per_fill(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 2) if xs else None


async def run(model: Path, label: str, file: Path, quick: bool) -> dict:
    text = file.read_text(encoding="utf-8")
    proc, url = start_standin(model)
    try:
        configs = {"embedded": {"modelPath": str(model)},
                   "openai_plain": {"backend": "openai", "endpoint": f"{url}/v1", "modelPath": str(model),
                                    "openaiDiffusion": "off"},
                   "openai": {"backend": "openai", "endpoint": f"{url}/v1", "modelPath": str(model)}}
        clients = {name: await start_lsp(init) for name, init in configs.items()}
        uris = {}
        for name, c in clients.items():
            uri = (file.parent / f"{name}-{file.name}").as_uri()  # never written to disk
            c.versions[uri] = 1
            c.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=text)))
            uris[name] = uri
        spots = places(text, (1 if quick else 10) + 1, 3 if quick else 6, seed=7)  # the first: a warm-up
        rows: dict[str, list[dict]] = {name: [] for name in clients}
        remote: dict[str, list[dict]] = {"openai": [], "openai_plain": []}
        names = list(clients)
        for k, spot in enumerate(spots):
            for name in (names if k % 2 == 0 else names[::-1]):
                seen = len(standin_log(url))
                done = await retype(clients[name], uris[name], text, spot)
                if k == 0:
                    continue  # warm-up spot
                rows[name] += done
                if name in remote:
                    remote[name] += [r for r in standin_log(url)[seen:] if not r["cancelled"]]
        for c in clients.values():
            await stop(c)
        served = httpx.get(f"{url}/standin/stats", timeout=10).json()
    finally:
        proc.kill()
        proc.wait()

    embedded = [r for r in rows["embedded"] if r["engine_ran"]]
    out: dict[str, Any] = {"model": label, "file": str(file), "served_canvas": served["served_canvas"],
                           "step_cap": served["step_cap"], "keystrokes": {k: len(v) for k, v in rows.items()}}
    out["fills"] = {"embedded": len(embedded), **{k: len(v) for k, v in remote.items()}}
    out["canvas_tokens_per_fill"] = {"embedded": per_fill([r["canvas"] for r in embedded]),
                                     "openai": per_fill([r["canvas_tokens"] for r in remote["openai"]]),
                                     "openai_plain": per_fill([r["canvas_tokens"] for r in remote["openai_plain"]])}
    # width x steps: the denoising work of a fill (the embedded steps are dg/status's, over every canvas it ran)
    out["canvas_token_steps_per_fill"] = {
        "embedded": per_fill([r["canvas"] * r["steps"] for r in embedded]),
        "openai": per_fill([r["canvas_token_steps"] for r in remote["openai"]]),
        "openai_plain": per_fill([r["canvas_token_steps"] for r in remote["openai_plain"]])}
    e, a = out["canvas_tokens_per_fill"]["embedded"], out["canvas_tokens_per_fill"]["openai"]
    out["openai_vs_embedded_canvas_tokens"] = round(a / e, 3) if e and a else None
    out["keystroke_ms"] = {name: {"p50": round(median([r["ms"] for r in rs]), 1),
                                  "p95": round(percentile([r["ms"] for r in rs], 0.95), 1)}
                           for name, rs in rows.items()}
    out["items"] = {name: sum(r["item"] for r in rs) for name, rs in rows.items()}
    out["errors"] = {name: sum(r["reason"] == "error" for r in rs) for name, rs in rows.items()}
    return out


def table(r: dict) -> str:
    c, w, ms = r["canvas_tokens_per_fill"], r["canvas_token_steps_per_fill"], r["keystroke_ms"]
    rows = [("model", r["model"]), ("file", r["file"]),
            ("stand-in: served canvas / step cap", f"{r['served_canvas']} / {r['step_cap']}"),
            ("canvas tokens per fill", f"embedded {c['embedded']}, openai before {c['openai_plain']}, "
                                       f"after {c['openai']} ({r['openai_vs_embedded_canvas_tokens']}x embedded)"),
            ("canvas tokens x steps per fill", f"embedded {w['embedded']}, openai before {w['openai_plain']}, "
                                               f"after {w['openai']}"),
            ("fills that ran the engine", json.dumps(r["fills"])),
            ("keystroke -> answer p50 / p95 (ms)", ", ".join(f"{k} {v['p50']} / {v['p95']}" for k, v in ms.items())),
            ("items shown / errors", f"{json.dumps(r['items'])} / {json.dumps(r['errors'])}")]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--file", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="one spot of 3 keystrokes after the warm-up (smoke tests)")
    ap.add_argument("--serve", action="store_true", help="run the stand-in alone")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.model, args.port)
        return None
    with tempfile.TemporaryDirectory(prefix="dgv-") as tmp:
        model, label = pick_model(Path(tmp), args.model, tokenizer=True)
        result = asyncio.run(run(model, label, pick_file(args.file), args.quick))
    print(table(result))
    emit(result)
    return result


if __name__ == "__main__":
    main()
