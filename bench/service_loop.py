"""How long the engine service's `GET /health` takes while it processes the largest prompts it accepts.

    python -m bench.service_loop [--model DIR] [--chars 1000000] [--rounds 3] [--quick]

One `dg-lsp serve-engine` on a private Unix socket, default limits (1 MiB bodies, 32768 prompt tokens). For each
round, four big requests one after another: a text prompt of `--chars` characters (~1 MB, code-like), the same
text split into `prompt` + `suffix`, the text as a chat message (a checkpoint without a chat template is served
from a copy of links with a minimal one), and a list of token ids filling the body limit. While each is in flight, a
second client polls `/health` back to back (10 ms apart) on a kept-alive connection, as an editor's watcher does
(it gives up after 0.5 s). Prompts that tokenize to more than the token limit are answered 413 after the whole
text is tokenized, so every request does the full tokenizing work. `service_health_max_ms` is the slowest poll of
all; the goal is <= 100 ms. Peak figures depend on the machine's load (the polls share the CPU with tokenizing).
`health_during` is the measurement alone, for other benches (bench.reliability) to call on their own service.
The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.common import checkout_env, emit, median, percentile

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("def", "return", "self", "value", "index", "for", "in", "range", "if", "else", "None", "print", "items",
         "result", "append", "len", "data", "+", "=", "==", "(", ")", ":", "[", "]", ",", "0", "1", "42", "'text'")


def code_like(chars: int, seed: int = 0) -> str:
    """`chars` characters of Python-looking lines (fixed seed)."""
    rng = random.Random(seed)
    lines, n = [], 0
    while n < chars:
        line = "    " * rng.randint(0, 3) + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)[:chars]


def big_bodies(chars: int, body_limit: int = 1 << 20) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, path, body) of the big requests: text prompt, prompt + suffix, token ids up to the body limit."""
    text = code_like(chars)
    half = len(text) // 2
    ids = [(i * 7919) % 200 + 10 for i in range(body_limit // 5)]  # "123, " is 5 bytes
    while len(str(ids)) + 32 > body_limit:
        ids = ids[: len(ids) * 9 // 10]
    return [("text", "/v1/completions", {"prompt": text, "max_tokens": 8}),
            ("text+suffix", "/v1/completions", {"prompt": text[:half], "suffix": text[half:], "max_tokens": 8}),
            ("chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": text}], "max_tokens": 8}),
            ("ids", "/v1/completions", {"prompt": ids, "max_tokens": 8})]


def health_during(client: Callable[[], httpx.Client], requests: list[tuple[str, str, dict[str, Any]]],
                  poll_s: float = 0.01) -> dict[str, Any]:
    """Send each request (one at a time) while polling `/health`; the latency of every poll, in ms.

    `client()` makes a new httpx.Client on the service (base URL set); one for the polls, one per request. The
    sender makes its client and encodes its body before the polls start: both hold this process's GIL (an httpx
    client loads the CA bundle), which would delay the polls here, not the service's answers."""
    polls: list[float] = []
    rows, failed = [], 0
    with client() as poller:
        poller.get("/health")  # connect first: the polls time answers, not connection set-up
        for label, path, body in requests:
            out: dict[str, Any] = {}
            ready = threading.Event()

            def send(path: str = path, body: dict[str, Any] = body, out: dict[str, Any] = out,
                     ready: threading.Event = ready) -> None:
                with client() as c:
                    content = json.dumps(body).encode()
                    ready.set()
                    t0 = time.perf_counter()
                    out["status"] = c.post(path, content=content, headers={"Content-Type": "application/json"}
                                           ).status_code
                    out["s"] = time.perf_counter() - t0

            worker = threading.Thread(target=send, daemon=True)
            worker.start()
            ready.wait()
            n0, started, worst_at = len(polls), time.perf_counter(), 0.0
            while worker.is_alive():
                t0 = time.perf_counter()
                try:
                    ok = poller.get("/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                polls.append((time.perf_counter() - t0) * 1e3)
                if polls[-1] >= max(polls[n0:]):
                    worst_at = t0 - started
                failed += not ok
                time.sleep(poll_s)
            worker.join()
            rows.append({"request": label, "status": out.get("status"), "seconds": round(out.get("s", 0.0), 3),
                         "polls": len(polls) - n0, "health_max_ms": round(max(polls[n0:], default=0.0), 2),
                         "health_max_at_s": round(worst_at, 3)})
    return {"service_health_max_ms": round(max(polls, default=0.0), 2),
            "service_health_p50_ms": round(median(polls), 2),
            "service_health_p99_ms": round(percentile(polls, 0.99), 2),
            "health_polls": len(polls), "health_failed": failed, "requests": rows}


def start(sock: Path, model: Path | None) -> subprocess.Popen:
    """`python -m engine.service` on the socket `sock` (and `model`, else its default), once /health says ready."""
    env = checkout_env(OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "engine.service", "--uds", str(sock)] + (["--model", str(model)] if model else [])
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while True:
        try:
            with uds_client(sock, 2.0) as c:
                if c.get("/health").json().get("state") == "ready":
                    return proc
        except (httpx.HTTPError, ValueError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the engine service did not start")
        time.sleep(0.1)


def with_chat_template(model: Path, tmp: Path) -> Path:
    """`model`, or when it has no chat template, a directory of links to its files with a minimal one."""
    from engine.prompts.template import find_chat_template

    if find_chat_template(model) is not None:
        return model
    out = tmp / model.name
    out.mkdir()
    for f in model.iterdir():
        if f.name != "tokenizer_config.json":
            (out / f.name).symlink_to(f.resolve())
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<model>"
    (out / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return out


def uds_client(sock: Path, timeout: float = 120.0) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://dg-engine", timeout=timeout)


def measure(model: Path | None = None, chars: int = 1_000_000, rounds: int = 3) -> dict[str, Any]:
    """Start a service, run `rounds` rounds of the big requests under /health polls, stop it."""
    from engine.engine import default_model_path

    with tempfile.TemporaryDirectory(prefix="dgl-") as tmp:
        os.chmod(tmp, 0o700)
        sock = Path(tmp) / "engine.sock"
        proc = start(sock, with_chat_template(model or default_model_path(), Path(tmp)))
        try:
            result = health_during(lambda: uds_client(sock), big_bodies(chars) * rounds)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    return {"chars": chars, "rounds": rounds, **result}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="checkpoint (default: the shipped model)")
    ap.add_argument("--chars", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="300,000 characters, one round (a smoke test)")
    args = ap.parse_args(argv)
    chars, rounds = (300_000, 1) if args.quick else (args.chars, args.rounds)
    result = measure(args.model, chars, rounds)
    for row in result["requests"]:
        print(f"{row['request']:12} HTTP {row['status']}  {row['seconds']:6.2f} s  {row['polls']:4d} polls  "
              f"/health max {row['health_max_ms']:7.2f} ms (at {row['health_max_at_s']:.2f} s)")
    emit(result)
    return result


if __name__ == "__main__":
    main()
