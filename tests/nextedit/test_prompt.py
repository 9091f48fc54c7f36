"""The next edit's prompt (dg_lsp.nextedit.prompt): FIM -- the history as comment diffs at the head of the prefix,
the window as the hole whose text seeds the canvas, within the budget; chat -- the window marked, the cursor in
its code, the history as a fenced diff with versions and the instruction; and the chat path over the server."""

from __future__ import annotations

from pathlib import Path

import pytest

from dg_lsp.documents import DocumentStore
from dg_lsp.nextedit.history import EditHistory
from dg_lsp.nextedit.prompt import CURSOR, build_next_edit_prompt, window_budget, window_hole
from dg_lsp.nextedit.window import editable_window
from engine.testing.published import build_published_checkpoint
from engine.tokens import InfillFormat

from .conftest import ask

URI = "file:///work/shapes.py"
BEFORE = "import os\n\n\ndef area(width, height):\n    return width * height\n"
AFTER = BEFORE.replace("(width,", "(wide,")
OFFSET = 16


def encode(text: str) -> list[int]:
    return [b + OFFSET for b in text.encode()]


def decode(ids: list[int]) -> str:
    return bytes(i - OFFSET for i in ids if i >= OFFSET).decode()


def setup(fmt_encode=encode, fmt=None, budget: int = 10_000):
    store = DocumentStore()
    store.open(URI, "python", 2, AFTER)
    snap = store.snapshot(URI)
    history = EditHistory()
    history.changed(URI, 1, 2, BEFORE, AFTER)
    cursor = AFTER.index("wide") + 4
    win = editable_window(snap, cursor, 2, 8, budget, fmt_encode)
    return snap, window_hole(snap, win), history.recent(URI), cursor


def test_fim_puts_the_history_as_comments_before_the_code_and_the_window_is_the_hole():
    fmt = InfillFormat(canvas_lengths=(16, 32, 64, 128, 256), max_context_tokens=None)
    snap, hole, history, cursor = setup()
    assert hole.replaced == "def area(wide, height):\n    return width * height"  # the definition, whole
    prompt = build_next_edit_prompt(snap, hole, encode, fmt, 1024, history=history, cursor=cursor)
    assert prompt.prefix == "import os\n\n\n" and prompt.suffix == "\n"
    ctx = prompt.context_ids
    assert ctx[:2] == [fmt.bos_id, fmt.fim_suffix_id] and ctx[-1] == fmt.fim_middle_id  # suffix first
    head = decode(ctx[ctx.index(fmt.fim_prefix_id) + 1:-1])
    assert head == "# -def area(width, height):\n# +def area(wide, height):\nimport os\n\n\n"
    assert prompt.canvas_length >= len(encode(hole.replaced))  # the seed fits one canvas
    assert prompt.max_canvases == 1


def test_fim_history_stays_within_a_quarter_of_the_budget():
    fmt = InfillFormat(canvas_lengths=(16, 32, 64, 128, 256), max_context_tokens=None)
    snap, hole, history, cursor = setup()
    prompt = build_next_edit_prompt(snap, hole, encode, fmt, 64, history=history, cursor=cursor)
    assert "# -def" not in decode(prompt.context_ids)  # 53 bytes of history do not fit 64 // 4 tokens


def test_the_window_budget_leaves_the_canvas_room_to_grow():
    fmt = InfillFormat(canvas_lengths=(16, 32, 64))
    assert window_budget(fmt) == 37  # (64 - 8) / 1.5: the shipped model's


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    return build_published_checkpoint(tmp_path_factory.mktemp("published") / "dg", canvas_length=128)


def test_chat_marks_the_window_and_the_cursor_and_carries_the_history_and_the_instruction(published):
    from engine.engine import Engine

    eng = Engine.from_pretrained(published, device="cpu")
    fmt = eng.prompt_format
    assert fmt.name == "chat"
    snap, hole, history, cursor = setup(eng.encode, fmt, window_budget(fmt))
    prompt = build_next_edit_prompt(snap, hole, eng.encode, fmt, 1024, history=history, cursor=cursor)
    text = eng.tokenizer.decode(prompt.context_ids, skip_special_tokens=False)
    assert f"def area(wide{CURSOR}, height):" in text
    assert "@@ -4 +4 @@ version 1 -> 2\n-def area(width, height):\n+def area(wide, height):" in text
    assert text.index("@@ -4 +4 @@") > text.index("import os")  # the file first (its KV cache is reused)
    assert "If no edit is needed, reply with that code unchanged" in text


def test_a_chat_checkpoint_answers_next_edits_over_the_server(servers, published):
    srv = servers.raw(published, {"minConfidence": 0})
    srv.open(URI, BEFORE, "python")
    srv.send(srv.change(URI, (3, 9), (3, 14), "wide"))
    msg_id, request = ask(srv, URI, 3, 13)
    srv.send(request)
    result = srv.response(msg_id, timeout=120)["result"]
    status = srv.until(lambda m: m.get("method") == "dg/status" and "request" in m["params"])
    assert status["params"]["request"]["canvasLength"] > 0  # the window went to the engine
    assert set(result) == {"edits"}
    assert all(e["textDocument"] == {"uri": URI, "version": 2} for e in result["edits"])
