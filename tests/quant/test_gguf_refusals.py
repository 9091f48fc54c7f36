"""Broken GGUF files refused by the engine's own layout check, with one line that names the tensor or header field
at fault: a file cut in half ("truncated: tensor ... needs bytes a..b, the file has n"), a tensor offset past the
end, a zero vocabulary, an absurd dimension, a metadata string longer than the file. Each path a user meets them on
logs that one line and no traceback: `dg-lsp --check`, the language server, the engine service."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_checkpoints import GGUF_SHAPE
from gguf_mutate import BREAKS

from bench.common import checkout_env
from bench.rawlsp import RawServer
from engine.engine import Engine
from engine.formats import gguf as G
from engine.formats import gguf_write as W
from engine.testing.tiny import build_tiny_checkpoint


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """break name -> (the broken file, the message it must get)."""
    root = tmp_path_factory.mktemp("gguf_broken")
    src = build_tiny_checkpoint(root / "hf", GGUF_SHAPE, canvas_length=16, seed=5)
    good = W.write_gguf(src, root / "good.gguf", "Q8_0")
    out = {}
    for name, make in BREAKS.items():
        data, message = make(good)
        (root / f"{name}.gguf").write_bytes(data)
        out[name] = (root / f"{name}.gguf", message)
    return out


@pytest.mark.parametrize("name", list(BREAKS))
def test_broken_file_is_refused_by_name(broken, name):
    path, message = broken[name]
    with pytest.raises(G.GGUFError) as err:
        Engine.from_pretrained(path, device="cpu", dtype="float32")
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text, text
    assert "\n" not in text and "reshape" not in text
    assert err.value.__cause__ is None and err.value.__suppress_context__  # nothing chained for a log to print


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "During handling" not in stderr, stderr[-3000:]


@pytest.mark.parametrize("name", ["cut_in_half", "zero_dimension"])
def test_check_prints_the_refusal_and_no_traceback(broken, name):
    path, message = broken[name]
    proc = subprocess.run([sys.executable, "-m", "dg_lsp", "--check", "--model", str(path)], capture_output=True,
                          text=True, env=checkout_env(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1"), timeout=300)
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert not out["ok"] and message in out["error"], out["error"]
    _no_traceback(proc.stderr)


def test_language_server_logs_one_line_per_broken_file(broken, tmp_path):
    """One server, its modelPath set to each broken file in turn: dg/status says error with the refusal, and stderr
    holds exactly one line naming each file's fault."""
    log = tmp_path / "stderr.txt"
    names = ["cut_in_half", "offset_past_end", "zero_dimension"]
    with log.open("wb") as err, RawServer(stderr=err) as srv:
        srv.initialize(options={"modelPath": str(broken[names[0]][0])}, initialized=True)
        for i, name in enumerate(names):
            path, message = broken[name]
            mark = srv.mark()
            if i:
                srv.notify("workspace/didChangeConfiguration", {"settings": {"dg": {"modelPath": str(path)}}})
            status = srv.wait(lambda m, p=path: m.get("method") == "dg/status" and m["params"]["state"] == "error"
                              and str(p) in m["params"].get("message", ""), timeout=120, since=mark)
            assert status is not None and message in status["params"]["message"], status
    stderr = log.read_text()
    _no_traceback(stderr)
    for name in names:
        path, message = broken[name]
        lines = [ln for ln in stderr.splitlines() if str(path) in ln]
        assert len(lines) == 1 and message in lines[0], (name, stderr[-3000:])


def test_engine_service_refuses_it_in_one_line_before_listening(broken, tmp_path):
    """serve-engine checks the checkpoint before it binds and announces (engine.tools.command.checked_model): a broken
    GGUF is one line naming the fault, exit 2, no traceback, and no socket is left behind."""
    path, message = broken["offset_past_end"]
    sock = tmp_path / "engine.sock"
    proc = subprocess.run([sys.executable, "-m", "engine.service", "--uds", str(sock), "--model", str(path),
                           "--log-file", str(tmp_path / "service.log")], capture_output=True, text=True,
                          env=checkout_env(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1"), timeout=300)
    stderr = proc.stderr
    assert proc.returncode == 2, stderr[-3000:]
    _no_traceback(stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and message in lines[0], stderr[-3000:]
    assert "listening" not in stderr and not sock.exists()
