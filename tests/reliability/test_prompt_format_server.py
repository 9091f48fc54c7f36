"""The server on each prompt format, over stdio: a fim checkpoint refuses a rewrite instruction clearly, a
published-layout (chat) checkpoint answers inline completion, fill hole and a rewrite whose instruction reaches its
prompt, and a checkpoint with neither format is a clear error while the server keeps answering."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.testing.published import build_published_checkpoint

from .conftest import pos

TEXT = "import os\n\ndef add(a, b):\n    total = a + b\n    return total\n"
URI = "file:///work/example.py"


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    return build_published_checkpoint(tmp_path_factory.mktemp("published") / "dg")


def rewrite(srv, instruction: str | None) -> tuple[dict, dict | None]:
    """dg.rewriteSelection of line 3 ("total = a + b"): the answer and the request's dg/status figures."""
    arg = {"textDocument": {"uri": URI}, "range": {"start": pos(3, 4), "end": pos(3, 17)}}
    if instruction is not None:
        arg["instruction"] = instruction
    msg_id, msg = srv.request("workspace/executeCommand", {"command": "dg.rewriteSelection", "arguments": [arg]})
    srv.send(msg)
    answer = srv.response(msg_id, timeout=120)
    figures = [m["params"]["request"] for m in srv.seen if m.get("method") == "dg/status"
               and m["params"].get("request", {}).get("id") == str(msg_id)]
    return answer, (figures[-1] if figures else None)


def test_a_fim_checkpoint_refuses_an_instruction_and_edits_nothing(start_server):
    srv = start_server({"debounceMs": 0})
    srv.open(URI, TEXT, "python")
    answer, _ = rewrite(srv, "make it async")
    result = answer["result"]
    assert result["applied"] is False
    assert result["reason"].startswith("this model's prompt format (fim) cannot take an instruction")
    shown = [m["params"]["message"] for m in srv.seen if m.get("method") == "window/showMessage"]
    assert any("cannot take an instruction" in m for m in shown), shown
    assert srv.applied == []
    blank, _ = rewrite(srv, "   ")  # a blank instruction is a plain re-fill, not a refusal
    assert "cannot take an instruction" not in (blank["result"]["reason"] or "")


def test_a_chat_checkpoint_fills_and_takes_an_instruction(start_server, published):
    srv = start_server({"debounceMs": 0}, model=published)
    srv.open(URI, TEXT, "python")
    inline = srv.call("textDocument/inlineCompletion", {"textDocument": {"uri": URI}, "position": pos(4, 16),
                                                        "context": {"triggerKind": 1}}, timeout=120)
    assert "result" in inline, inline  # an item or null (the syntax gate may drop a random model's answer)
    fill = srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [
        {"textDocument": {"uri": URI}, "position": pos(4, 16)}]}, timeout=120)
    assert isinstance(fill["result"]["applied"], bool), fill
    plain, plain_figures = rewrite(srv, None)
    instructed, instructed_figures = rewrite(srv, "make it async")
    for answer in (plain, instructed):
        assert isinstance(answer["result"]["applied"], bool), answer
        assert "cannot take an instruction" not in (answer["result"]["reason"] or "")
    # the instruction is in the chat prompt: the same hole's context is longer by its tokens
    assert plain_figures is not None and instructed_figures is not None
    assert instructed_figures["contextTokens"] > plain_figures["contextTokens"]
    for edit in srv.applied:  # every edit the server sent is a versioned edit of this document's version 1
        (change,) = edit["edit"]["documentChanges"]
        assert change["textDocument"] == {"uri": URI, "version": 1}


def test_a_checkpoint_with_neither_format_is_a_clear_error_and_the_server_answers(start_server, published,
                                                                                  tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(published, bare)
    (bare / "chat_template.jinja").unlink()
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    srv = start_server({"debounceMs": 0}, model=bare, wait="error")
    error = [m["params"] for m in srv.seen if m.get("method") == "dg/status" and m["params"]["state"] == "error"][-1]
    assert "chat_template.jinja" in error["message"] and "infill.json" in error["message"], error
    srv.open(URI, TEXT, "python")
    inline = srv.call("textDocument/inlineCompletion", {"textDocument": {"uri": URI}, "position": pos(4, 16),
                                                        "context": {"triggerKind": 1}})
    assert inline["result"] is None
    assert srv.call("shutdown", None)["result"] is None
