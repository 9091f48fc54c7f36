"""An editor's first session on the shipped demo model says once, plainly, that its fills are held back by the
confidence gate and how to see them (window/showMessage, Info); another checkpoint's withheld fills do not."""

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

