"""A GPU piece that fails its self-check at load, seen from the editor over stdio: dg/status carries
`gpu: {checked, fellBack: [{piece, reason}]}` and the server shows one window/showMessage warning, then serves.

The failure is a test double in the kernel table the engine is checked with (the real pieces do not apply on a
CPU): the server process is the real one, started with an engine factory that loads the model as `dg-lsp` does and
checks it against a table whose Triton vocabulary pass raises."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time

from server_harness import server_env

from bench.rawlsp import message, read_frames

SERVER = """
import dataclasses, sys
from dg_lsp.backends.loading import load_engine
from dg_lsp.server import build_server
from dg_lsp.wire.stdio import serve_stdio
from engine.denoising.checked_runner import default_table
from engine.kernels.table import vocab_piece

def raising(*a):
    raise RuntimeError("no kernel image is available for execution on the device")

def table(t):
    bad = dataclasses.replace(vocab_piece(t), fast=raising, applies=lambda t: True)
    return [bad if p.name == "vocab_pass" else p for p in default_table(t)]

def factory(settings):
    eng = load_engine(settings)
    eng.self_check(table)
    return eng

sys.exit(serve_stdio(build_server(engine_factory=factory, default_model=sys.argv[1])))
"""


def test_a_piece_that_fell_back_is_in_the_status_and_one_warning(tiny_ckpt):
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(tiny_ckpt)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=server_env())
    got: queue.Queue = queue.Queue()
    threading.Thread(target=read_frames, args=(proc.stdout, got.put), daemon=True).start()
    send = lambda **m: (proc.stdin.write(message(**m)), proc.stdin.flush())  # noqa: E731
    seen: list[dict] = []

    def until(pred, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            msg = got.get(timeout=max(0.01, deadline - time.monotonic()))
            seen.append(msg)
            if pred(msg):
                return msg

    try:
        send(id=1, method="initialize", params=dict(processId=None, rootUri=None, capabilities={}))
        until(lambda m: m.get("id") == 1)
        send(method="initialized", params={})
        ready = until(lambda m: m.get("method") == "dg/status" and m["params"]["state"] in ("ready", "error"))
        assert ready["params"]["state"] == "ready", ready
        gpu = ready["params"]["gpu"]
        assert gpu["checked"] == ["vocab_pass"]
        assert gpu["fellBack"] == [{"piece": "vocab_pass", "reason": "raised RuntimeError: no kernel image is "
                                                                     "available for execution on the device"}]
        # it serves (through the eager vocabulary pass): a fill, and its status still says what fell back
        send(method="textDocument/didOpen", params={"textDocument": {
            "uri": "file:///a.py", "languageId": "python", "version": 1, "text": "def add(a, b):\n    return \n"}})
        send(id=2, method="textDocument/inlineCompletion", params={
            "textDocument": {"uri": "file:///a.py"}, "position": {"line": 1, "character": 11},
            "context": {"triggerKind": 1}})
        answer = until(lambda m: m.get("id") == 2)
        assert "error" not in answer, answer
        after = until(lambda m: m.get("method") == "dg/status" and "request" in m["params"])
        assert after["params"]["gpu"] == gpu
        warnings = [m["params"]["message"] for m in seen if m.get("method") == "window/showMessage"
                    and m["params"]["type"] == 2]
        assert len(warnings) == 1, warnings
        assert "vocab_pass" in warnings[0] and "dg-lsp doctor" in warnings[0]
        send(id=3, method="shutdown")
        until(lambda m: m.get("id") == 3)
        send(method="exit")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        print(json.dumps(seen)[-2000:])
