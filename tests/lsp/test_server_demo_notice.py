"""An editor's first session on the shipped demo model says once, plainly, that its fills are held back by the
confidence gate and how to see them (window/showMessage, Info); another checkpoint's withheld fills do not. A withheld
command says it all in one message: VS Code drops the fourth notification of a burst (more than 3 within 800 ms), and
the fourth was the extension's "Apply anyway" offer (its e2e scenario "withheld")."""

from __future__ import annotations

import pytest
from lsprotocol import types as T
from server_harness import inline_params, open_doc, start_server, stop_server, wait_for

# Plain text: no syntax check drops a fill, so the gate is what decides (python code, read as text).
TEXT = "def area(r):\n    return \n\ndef scaled(x, factor):\n    return x * \n\nvalues = [1, 2, 3]\ntotal = \n"
HOLES = [(1, 11), (4, 15), (7, 8), (6, 10)]


async def withheld_fills(client, uri: str) -> int:
    """Ask for an inline fill at every hole, one after another; how many the gate withheld (dg/status)."""
    held = 0
    for line, char in HOLES:
        seen = len(client.statuses)
        await client.text_document_inline_completion_async(inline_params(uri, line, char, automatic=False))
        # the request's figures come in a dg/status after its answer
        stats = await wait_for(lambda n=seen: next((s["request"] for s in client.statuses[n:] if s.get("request")),
                                                   None), timeout=30, what="the fill's dg/status")
        held += stats["reason"] == "low confidence"
    return held


def notices(client) -> list[T.ShowMessageParams]:
    return [m for m in client.messages if "demo model" in m.message]


def fill_hole(uri: str, line: int, char: int) -> T.ExecuteCommandParams:
    return T.ExecuteCommandParams(command="dg.fillHole", arguments=[
        {"textDocument": {"uri": uri}, "position": {"line": line, "character": char}}])


@pytest.mark.asyncio
async def test_the_demo_models_first_withheld_fill_is_explained_once(tmp_path):
    client = await start_server(None, {"debounceMs": 0})  # no --model, no modelPath: the shipped demo model
    try:
        uri = (tmp_path / "shapes.txt").as_uri()
        open_doc(client, uri, TEXT, language_id="plaintext")
        held = await withheld_fills(client, uri)
        assert held >= 2, f"the demo model's gate withheld {held} of {len(HOLES)} fills: nothing to explain twice"
        await wait_for(lambda: notices(client), timeout=5, what="the demo model's notice")
        (notice,) = notices(client)  # once, though the gate withheld several
        assert notice.type == T.MessageType.Info
        text = notice.message
        assert "Fill hole anyway" in text and "minConfidence" in text and "modelPath" in text, text
    finally:
        await stop_server(client)


@pytest.mark.asyncio
async def test_another_checkpoints_withheld_fills_bring_no_demo_notice(tmp_path, tiny_ckpt):
    client = await start_server(tiny_ckpt, {"debounceMs": 0, "minConfidence": 1})
    try:
        uri = (tmp_path / "shapes.txt").as_uri()
        open_doc(client, uri, TEXT, language_id="plaintext")
        held = await withheld_fills(client, uri)
        assert held >= 1, "a gate of 1 withholds every fill"
        assert not notices(client), [m.message for m in client.messages]
    finally:
        await stop_server(client)



@pytest.mark.asyncio
async def test_a_withheld_fill_hole_on_the_demo_model_is_one_message_with_the_notice_in_it(tmp_path):
    # the e2e scenario's file and cursor; a gate of 1 withholds every fill
    client = await start_server(None, {"debounceMs": 0, "minConfidence": 1})
    try:
        uri = (tmp_path / "gate.py").as_uri()
        open_doc(client, uri, "def square(x):\n    \n\n\nprint(square(3))\n", language_id="python")
        before = len(client.messages)
        result = await client.workspace_execute_command_async(fill_hole(uri, 1, 4))
        # what the extension reads to offer "Apply anyway" (editors/vscode/src/requests.ts parseCommandResult)
        assert result["applied"] is False and result["reason"] == "low confidence", result
        assert 0.0 <= result["confidence"] < 1.0 and result["minConfidence"] == 1.0, result
        assert isinstance(result["version"], int) and isinstance(result["documentOpen"], int), result
        # the server's messages come before its answer: with the editor's progress and the extension's offer, 3
        (said,) = client.messages[before:]
        assert said.message.startswith("dg-lsp: fill withheld: confidence"), said.message
        assert "Fill hole anyway" in said.message and "demo model" in said.message and "modelPath" in said.message
        # once: the next withheld command's message is the plain one
        await client.workspace_execute_command_async(fill_hole(uri, 1, 4))
        (again,) = client.messages[before + 1:]
        assert "withheld" in again.message and "demo model" not in again.message, again.message
    finally:
        await stop_server(client)
