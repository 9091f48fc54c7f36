"""The server over stdio on a mask-diffusion checkpoint (a tiny Dream in its published layout): fill hole and rewrite
selection land as one applyEdit each, drafts stream per step, and the confidence gate withholds a fill it does not
trust; the same pipeline as DiffusionGemma's, with the family's engine behind the seam."""

from __future__ import annotations

import pytest
import pytest_asyncio
from lsprotocol import types as T
from server_harness import open_doc, start_server, stop_server

TEXT = "alpha beta gamma\ndelta epsilon\n\nzeta eta theta\n"


@pytest.fixture(scope="module")
def dream_ckpt(tmp_path_factory):
    from engine.testing.families import tiny_family

    return tiny_family(tmp_path_factory.mktemp("dream") / "Dream-tiny", "dream", "gqa_untied", seed=4)[0]


@pytest_asyncio.fixture
async def client(dream_ckpt, request):
    c = await start_server(dream_ckpt, {"debounceMs": 0, "drafts": True, **getattr(request, "param", {})})
    yield c
    await stop_server(c)


def at(line: int, char: int) -> T.Position:
    return T.Position(line=line, character=char)


async def test_fill_hole_and_rewrite_selection_apply_one_edit_each(client):
    uri = "file:///dream.txt"
    open_doc(client, uri, TEXT, "plaintext")
    assert client.statuses[-1]["state"] == "ready"
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        text_document=T.TextDocumentIdentifier(uri=uri), range=T.Range(at(1, 4), at(1, 13)),
        context=T.CodeActionContext(diagnostics=[])))
    assert [a.title for a in actions] == ["Fill hole", "Rewrite selection"]
    for action in actions:
        before = len(client.applied_edits)
        result = await client.workspace_execute_command_async(
            T.ExecuteCommandParams(command=action.command, arguments=action.arguments))
        assert result["applied"] is True and result["reason"] is None, result
        assert len(client.applied_edits) == before + 1
        assert client.applied_edits[-1].edit.document_changes[0].edits[0].new_text
    drafts = [d for d in client.drafts if d["uri"] == uri]
    assert drafts and drafts[-1]["done"] and [d["step"] for d in drafts if not d["done"]][:2] == [1, 2]


@pytest.mark.parametrize("client", [{"minConfidence": 1.0}], indirect=True)
async def test_the_confidence_gate_withholds_an_untrusted_fill(client):
    uri = "file:///gate.txt"
    open_doc(client, uri, TEXT, "plaintext")
    before = len(client.applied_edits)
    result = await client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="dg.fillHole", arguments=[{"textDocument": {"uri": uri}, "position": {"line": 3, "character": 4}}]))
    assert result["applied"] is False and "confidence" in str(result["reason"]), result
    assert len(client.applied_edits) == before
