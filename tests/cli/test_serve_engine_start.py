"""`dg-lsp serve-engine` refuses what it cannot serve before it says "listening": a model folder that is not one,
damaged weights, `--device cuda` without CUDA, a busy port, a bad flag: one line each, exit 2. A model that fails to
load after "listening" ends the service with one line and exit 1 (it once answered 503 forever), its traceback in
the log file, never on the terminal."""

from __future__ import annotations

import json
import shutil
import socket

import pytest
from cli_harness import DEFAULT_MODEL, one_line, run


def serve(tmp_path, *args: str):
    return run(["serve-engine", "--port", "0", *args], tmp_path)


def copy_model(tmp_path, name: str = "model"):
    return shutil.copytree(DEFAULT_MODEL, tmp_path / name)


def test_a_model_folder_that_does_not_exist(tmp_path):
    out = serve(tmp_path, "--model", str(tmp_path / "nope"))
    assert out.returncode == 2 and "no such checkpoint" in one_line(out.stderr)


def test_a_folder_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "notes").mkdir()
    out = serve(tmp_path, "--model", str(tmp_path / "notes"))
    assert out.returncode == 2 and "is not a checkpoint this engine reads" in one_line(out.stderr)


def test_damaged_weights_are_refused_before_listening(tmp_path):
    model = copy_model(tmp_path)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    out = serve(tmp_path, "--model", str(model))
    line = one_line(out.stderr)
    assert out.returncode == 2 and str(model) in line and "SafetensorError" in line


def test_device_cuda_without_cuda(tmp_path):
    out = serve(tmp_path, "--device", "cuda")  # the harness hides every GPU
    assert out.returncode == 2 and "--device cuda" in one_line(out.stderr) and "no CUDA" in out.stderr


def test_a_busy_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run(["serve-engine", "--port", str(port)], tmp_path)
    assert out.returncode == 2
    assert one_line(out.stderr) == f"dg-lsp serve-engine: cannot listen on 127.0.0.1:{port}: Address already in use"


@pytest.mark.parametrize("args", [["--port", "http"], ["--dtype", "fp4"], ["--max-queue"]])
def test_a_bad_flag(tmp_path, args):
    out = run(["serve-engine", *args], tmp_path)
    assert out.returncode == 2 and one_line(out.stderr).startswith("dg-lsp serve-engine: error: ")


def test_a_load_that_fails_after_listening_exits_1_with_the_traceback_in_the_log(tmp_path):
    model = copy_model(tmp_path)  # its config reads, its weights do not fit it: found only when loading
    config = json.loads((model / "config.json").read_text())
    config["text_config"]["intermediate_size"] *= 2
    (model / "config.json").write_text(json.dumps(config))
    log = tmp_path / "service.log"
    out = serve(tmp_path, "--model", str(model), "--log-file", str(log))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 2 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("dg-lsp serve-engine: listening on http://127.0.0.1:")
    assert lines[1].startswith(f"dg-lsp serve-engine: could not load the model {model}: CheckpointError: ")
    assert lines[1].endswith(f"(traceback in {log})") and "Traceback" in log.read_text()
