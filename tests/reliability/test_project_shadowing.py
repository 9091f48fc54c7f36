"""The server runs in the user's project (editors start it there): project files named like modules the server
imports must not replace them. Found by the VS Code tier: a workspace `gguf.py` was imported by the GGUF loader in
place of the `gguf` package."""

from __future__ import annotations

from .conftest import RawServer, pos

SHADOWS = ("json", "numpy", "gguf", "torch", "tokenizers", "asyncio")


def test_project_files_do_not_shadow_the_servers_modules(tiny_ckpt, tmp_path, monkeypatch):
    for name in SHADOWS:
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('the project file {name}.py was imported')\n")
    monkeypatch.chdir(tmp_path)  # the server process starts here, as an editor starts it in its workspace
    srv = RawServer(tiny_ckpt)
    try:
        srv.initialize({"debounceMs": 0, "steps": 2, "minConfidence": 0})
        uri = (tmp_path / "notes.txt").as_uri()
        srv.open(uri, "shopping list\n- apples\n")
        got = srv.call("textDocument/inlineCompletion", {"textDocument": {"uri": uri}, "position": pos(1, 9),
                                                         "context": {"triggerKind": 1}})
        assert "error" not in got and got["result"]["items"], got
    finally:
        srv.close()
