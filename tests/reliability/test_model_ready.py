"""A model is "ready" only when it can fill (issue 11, item 8). Each broken checkpoint is the shipped model copied
with one thing broken; the server reports a clear error at load, answers requests empty and stays up."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from engine.engine import default_model_path

from .conftest import pos

TEXT = "def add(a, b):\n    return \n"


def copy_model(tmp_path: Path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(default_model_path(), dst)
    return dst


def without_tokenizer(path: Path) -> None:
    (path / "tokenizer.json").unlink()


def with_nan_weights(path: Path) -> None:
    """Overwrite one tensor's bytes with 0xFF (a NaN in float32), as a damaged download would."""
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    name = next(k for k in header if "layers.1" in k and k.endswith("down_proj.weight"))
    a, b = header[name]["data_offsets"]
    data[8 + n + a:8 + n + b] = b"\xff" * (b - a)
    weights.write_bytes(bytes(data))


def with_huge_canvas(path: Path) -> None:
    infill = json.loads((path / "infill.json").read_text())
    infill["canvas_lengths"] = [200_000]
    (path / "infill.json").write_text(json.dumps(infill))


@pytest.mark.parametrize("breaks,says", [
    (without_tokenizer, "tokenizer.json"),
    (with_nan_weights, "NaN or infinite"),
    (with_huge_canvas, "canvas_lengths"),
])
def test_a_broken_checkpoint_is_an_error_at_load_and_the_server_stays_up(start_server, tmp_path, breaks, says):
    model = copy_model(tmp_path)
    breaks(model)
    srv = start_server({"debounceMs": 0}, model=model, wait="error")
    error = [m["params"] for m in srv.seen if m.get("method") == "dg/status" and m["params"]["state"] == "error"][-1]
    assert says in error["message"], error
    assert "Traceback" not in error["message"]
    assert not [m for m in srv.seen if m.get("method") == "dg/status" and m["params"]["state"] == "ready"]
    shown = [m["params"]["message"] for m in srv.seen if m.get("method") == "window/showMessage"]
    assert any(says in m for m in shown), shown
    srv.open("file:///a.py", TEXT, "python")
    inline = srv.call("textDocument/inlineCompletion", {"textDocument": {"uri": "file:///a.py"},
                                                        "position": pos(1, 11), "context": {"triggerKind": 1}})
    assert inline["result"] is None
    command = srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": {"uri": "file:///a.py"}, "position": pos(1, 11)}]})
    assert "result" in command, command
    assert command["result"]["applied"] is False and "not ready" in command["result"]["reason"]
    assert srv.call("shutdown", None)["result"] is None  # answered: the server is not stuck


def test_a_second_initialized_does_not_reload(start_server):
    srv = start_server({"debounceMs": 0})
    loads = lambda: [m for m in srv.seen if m.get("method") == "dg/status" and m["params"]["state"] == "loading"]  # noqa: E731
    assert len(loads()) == 1
    srv.send(srv.notification("initialized", {}))
    assert srv.call("textDocument/codeAction", {  # a round trip after it: the notification was handled
        "textDocument": {"uri": "file:///none.py"}, "range": {"start": pos(0, 0), "end": pos(0, 0)},
        "context": {"diagnostics": []}})["result"] == []
    assert len(loads()) == 1
    srv.open("file:///b.txt", "alpha beta\n")
    reply = srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": {"uri": "file:///b.txt"}, "position": pos(0, 5)}]})
    assert reply["result"]["applied"] is True
