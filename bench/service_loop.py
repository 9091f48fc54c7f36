"""`bench.reliability`'s engine-service phase (issue 21): is the service's event loop free while it works on big
prompts? The engine service (`python -m engine.service`, shipped model, private Unix socket) gets text prompts of
up to 1,000,000 characters (under its 1 MiB body limit), one after another, while another connection polls
`GET /health` every 20 ms. An editor's health check gives up after 0.5 s; the target is 100 ms.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.rawlsp import ROOT
from bench.tally import Tally

POLL_S = 0.02
URL = "http://dg-engine"


def big_prompt(chars: int, seed: int) -> str:
    """`chars` characters of plausible Python (short lines: JSON escapes each newline to two bytes)."""
    rng = random.Random(seed)
    words = ["value", "total", "index", "result", "items", "count", "name", "data", "node", "key"]
    lines, total = [], 0
    while total < chars:
        a, b = rng.choice(words), rng.choice(words)
        line = f"{a}_{rng.randrange(1000)} = {b}_{rng.randrange(1000)} + {rng.randrange(100)}\n"
        lines.append(line)
        total += len(line)
    return "".join(lines)[:chars]


def run_service_loop(tally: Tally, prompts: int, chars: int) -> float:
    """Send `prompts` prompts of `chars` characters; returns the longest /health round trip (ms) meanwhile."""
    from bench.service import start_service

    with tempfile.TemporaryDirectory(prefix="dgr-") as tmp:
        os.chmod(tmp, 0o700)
        sock = Path(tmp) / "engine.sock"
        service = start_service(sock, ROOT / "engine" / "default_model")
        waits: list[float] = []
        failed = 0
        stop = threading.Event()

        def poll() -> None:
            nonlocal failed
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=60) as h:
                while not stop.is_set():
                    t0 = time.monotonic()
                    try:
                        h.get(f"{URL}/health").raise_for_status()
                    except httpx.HTTPError:
                        failed += 1
                    waits.append(time.monotonic() - t0)
                    time.sleep(POLL_S)

        poller = threading.Thread(target=poll, daemon=True)
        codes, times = [], []
        try:
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=300) as h:
                h.post(f"{URL}/v1/completions", json={"prompt": "x = 1\n", "max_tokens": 8})  # warm-up
                poller.start()
                time.sleep(0.5)  # a few idle polls first
                for i in range(prompts):
                    t0 = time.monotonic()
                    try:
                        codes.append(h.post(f"{URL}/v1/completions", json={
                            "prompt": big_prompt(chars, i), "max_tokens": 8}).status_code)
                    except httpx.HTTPError as e:
                        codes.append(type(e).__name__)
                    times.append(time.monotonic() - t0)
                time.sleep(0.5)
        finally:
            stop.set()
            if poller.is_alive():
                poller.join(60)
            alive = service.poll() is None
            service.terminate()
            service.wait(30)
        if not alive:
            tally.crashes += 1
            tally.native_crashes += service.returncode < 0
    longest = max(waits, default=float("nan")) * 1e3
    tally.row("service", f"{prompts} prompts of {chars:,} chars: answers (HTTP) / seconds each",
              f"{codes} / {[round(t, 1) for t in times]}")
    tally.row("service", "/health polls meanwhile (failed) / longest (ms) / service alive",
              f"{len(waits)} ({failed}) / {longest:.0f} / {alive}")
    return longest
