"""The Neovim plugin against the real dg-lsp server on each mask-diffusion family's tiny checkpoint in its published
layout (engine/testing/families.py: a Dream and a LLaDA): the server says ready naming that checkpoint, `:DgFill`
lands a fill in the buffer, only inside the hole (text inserted at the cursor, nothing else moved), and one undo
restores the buffer. The confidence gate is off (minConfidence 0): random weights are never confident.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.editors.test_neovim import (
    NOTES,
    REAL_CMD,
    REAL_FILL_S,
    REAL_READY_S,
    buffer_text,
    cursor_offset,
    editor,  # noqa: F401 -- the fixture: one `nvim --embed` with the plugin
    neovim_present,  # noqa: F401 -- autouse: fail (make test) or skip without Neovim 0.12
    wait_for,
)

pytestmark = pytest.mark.editor

FAMILIES = {"dream": "gqa_untied", "llada": "mha"}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_model(request, tmp_path_factory) -> tuple[str, Path]:
    from engine.testing.families import tiny_family

    family = request.param
    root = tmp_path_factory.mktemp(family)
    return family, tiny_family(root / f"{family}-tiny", family, FAMILIES[family], seed=4)[0]


def test_fill_command_lands_inside_the_hole_on_each_family(editor, family_model):  # noqa: F811
    family, path = family_model
    editor.setup(REAL_CMD, {"modelPath": str(path), "device": "cpu", "minConfidence": 0})
    editor.open("notes.txt", NOTES)  # plain text: no syntax gate between a random model's fill and the buffer
    editor.wait_ready(REAL_READY_S)
    assert path.name in editor.lua("return require('dg.status').get(0).model"), family  # this checkpoint is loaded
    editor.nvim.command("normal! 3G$")  # on the last character of "- pears": the hole is an insert at the cursor
    before, at = buffer_text(editor), cursor_offset(editor)
    lines = editor.lines()
    editor.nvim.command("DgFill")
    wait_for(lambda: editor.lines() != lines or "not applied" in editor.messages(), REAL_FILL_S,
             f"the {family} fill (or its refusal)")
    assert "not applied" not in editor.messages(), editor.messages()
    after = buffer_text(editor).encode()
    head, tail = before.encode()[:at], before.encode()[at:]
    assert after.startswith(head) and after.endswith(tail) and len(after) > len(before.encode()), (before, after)
    inserted = after[len(head): len(after) - len(tail)].decode()
    assert "\n" not in inserted, f"a one-line hole got {inserted!r}"
    editor.nvim.input("u")
    wait_for(lambda: editor.lines() == lines, 5, "one undo to restore")
