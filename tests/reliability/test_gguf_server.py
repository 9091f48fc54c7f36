"""The real `dg-lsp` process over stdio serving a GGUF: the shipped model's weights written as a Q8_0/F32 GGUF in
the published layout (llama.cpp's names and keys), given as `--model FILE` with nothing beside it (tokenizer rebuilt
from the file's metadata) and as the `modelPath` setting with the HF tokenizer files beside it. Each gets to
ready, and inline completion and dg.fillHole answer with a fill."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.formats.gguf_write import write_shipped

from .conftest import RawServer, pos

TEXT = "import math\n\n\ndef distance(p, q):\n    dx = q[0] - p[0]\n    dy = q[1] - p[1]\n    return math.\n"
URI = "file:///work/distance.py"
AT = pos(6, 16)  # after "    return math."


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf_server")
    return {"alone": write_shipped(root / "alone"), "beside": write_shipped(root / "beside", beside=True)}


def fills(srv: RawServer) -> tuple[str, dict]:
    """The inline item's text and dg.fillHole's answer at the end of `return math.`."""
    srv.open(URI, TEXT, "python")
    inline = srv.call("textDocument/inlineCompletion", {"textDocument": {"uri": URI}, "position": AT,
                                                        "context": {"triggerKind": 1}}, timeout=120)
    result = inline["result"]
    items = result["items"] if isinstance(result, dict) else result
    assert items, inline
    fill = srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": {"uri": URI}, "position": AT}]}, timeout=120)
    return items[0]["insertText"], fill["result"]


def ready_model(srv: RawServer) -> str:
    ready = [m["params"] for m in srv.seen if m.get("method") == "dg/status" and m["params"]["state"] == "ready"]
    return ready[-1]["model"]


@pytest.mark.parametrize("how", ["--model", "modelPath"])
def test_a_gguf_loads_and_fills(start_server, ggufs, how):
    path = ggufs["alone" if how == "--model" else "beside"]
    if how == "--model":
        srv = start_server({"debounceMs": 0, "minConfidence": 0}, model=path)
    else:  # the server's --model is the tiny safetensors checkpoint; the setting names the GGUF file
        srv = start_server({"debounceMs": 0, "minConfidence": 0, "modelPath": str(path)})
    assert path.name in ready_model(srv)
    text, fill = fills(srv)
    assert text.strip(), text
    assert fill["applied"] is True, fill
    (edit,) = srv.applied
    (change,) = edit["edit"]["documentChanges"]
    assert change["textDocument"] == {"uri": URI, "version": 1}
    assert "".join(e["newText"] for e in change["edits"]).strip()
