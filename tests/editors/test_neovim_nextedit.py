"""Next edits in the Neovim plugin (editors/neovim/lua/dg/nextedit): headless Neovim 0.12 driven through pynvim.

Three layers like tests/editors/test_neovim.py: the Lua logic alone (`nvim -l tests/test_nextedit.lua`), the plugin
against the scripted stub server (exact proposals, a log of what was shown and accepted), and the plugin against
the real dg-lsp server with the shipped model.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.editors.test_neovim import (
    DEFAULT_MODEL,
    NVIM,
    PLUGIN,
    REAL_CMD,
    REAL_FILL_S,
    REAL_READY_S,
    STUB_CMD,
    Editor,
    neovim_present,  # noqa: F401 -- autouse: fail (make test) or skip without Neovim 0.12
    stub_events,
    wait_for,
)
from tests.editors.tiers import need_program
from tests.nextedit.conftest import apply

pytestmark = pytest.mark.editor

MARKS = """
local ns = require('dg.nextedit').ns
return vim.tbl_map(function(m)
  local d = m[4]
  return {row = m[2], col = m[3], end_col = d.end_col, hl = d.hl_group, sign = d.sign_text and vim.trim(d.sign_text),
          inline = d.virt_text and d.virt_text[1][1],
          lines = d.virt_lines and vim.tbl_map(function(l) return l[1][1] end, d.virt_lines)}
end, vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {details = true}))
"""


@pytest.fixture
def editor(tmp_path):
    ed = Editor(tmp_path)
    yield ed
    ed.close()


def marks(editor: Editor) -> list[dict]:
    return editor.lua(MARKS)


def shown(editor: Editor) -> bool:
    return editor.lua("return require('dg.nextedit').get(0) ~= nil")


def test_lua_nextedit_logic():
    proc = subprocess.run([NVIM, "--clean", "--headless", "-l", str(PLUGIN / "tests" / "test_nextedit.lua")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout


def test_help_tags_for_next_edits(tmp_path):
    ed = Editor(tmp_path)  # the plugin's shipped doc/tags
    try:
        for tag in ("dg-next-edit", ":DgNextEdit", ":DgNextEditAccept", ":DgNextEditDismiss", "DgNextEditDelete"):
            ed.nvim.command(f"help {tag}")
            assert ed.nvim.current.buffer.name.endswith("dg.txt")
            ed.nvim.command("helpclose")
    finally:
        ed.close()


# --- against the scripted server ----------------------------------------------------------------------------------

RENAME = "count = 1\nprint(count)\ntotal = count + 1\n"
# After `cwn<Esc>` on line 1: the two other uses of the old name.
RENAME_EDITS = [
    {"text": "n", "range": {"start": {"line": 1, "character": 6}, "end": {"line": 1, "character": 11}}},
    {"text": "n", "range": {"start": {"line": 2, "character": 8}, "end": {"line": 2, "character": 13}}},
]
RENAMED = ["n = 1", "print(n)", "total = n + 1"]


def start_stub(editor: Editor, tmp_path, edits=RENAME_EDITS, text=RENAME, **settings) -> None:
    settings = {"stubLog": str(tmp_path / "stub.jsonl"), "stubDelay": 0.02, "stubNextEdit": edits,
                "nextEditDebounceMs": 100, **settings}
    editor.setup(STUB_CMD, settings)
    editor.open("demo.py", text)
    editor.wait_ready(30)


def events(tmp_path, kind: str) -> list[dict]:
    return [e for e in stub_events(tmp_path) if e["event"] == kind]


def rename_and_wait(editor: Editor) -> None:
    editor.nvim.input("1Gcwn<Esc>")
    wait_for(lambda: shown(editor), 10, "the next edit")


def test_stub_edit_shows_a_proposal_and_tab_accepts_it_in_one_undo(editor, tmp_path):
    start_stub(editor, tmp_path)
    rename_and_wait(editor)
    assert editor.lines() == ["n = 1", "print(count)", "total = count + 1"]  # drawn, not applied
    assert tuple(editor.nvim.current.window.cursor) == (1, 0)  # where the edit left it
    assert marks(editor) == [
        {"row": 1, "col": 6, "end_col": 11, "hl": "DgNextEditDelete"},
        {"row": 1, "col": 11, "inline": "n"},
        {"row": 2, "col": 8, "end_col": 13, "hl": "DgNextEditDelete"},
        {"row": 2, "col": 13, "inline": "n"},
    ]
    [request] = events(tmp_path, "nextEdit")
    assert request["version"] == request["documentVersion"] and request["trigger"] == 2
    assert (request["line"], request["character"]) == (0, 0)
    wait_for(lambda: events(tmp_path, "nextEditShown"), 5, "didShowInlineEdit")
    editor.nvim.input("<Tab>")
    wait_for(lambda: editor.lines() == RENAMED, 5, "the accepted proposal")
    assert marks(editor) == [] and not shown(editor)
    [accepted] = wait_for(lambda: events(tmp_path, "nextEditAccepted"), 5, "dg.acceptNextEdit")
    assert accepted["argument"]["version"] == request["version"] and accepted["argument"]["id"] == "ne-1"
    assert accepted["text"] == "\n".join(RENAMED) + "\n"  # the server had the accepted text before the command
    editor.nvim.input("u")
    wait_for(lambda: editor.lines() == ["n = 1", "print(count)", "total = count + 1"], 5, "one undo")


def test_stub_insert_mode_tab_accepts_and_stays_in_insert_mode(editor, tmp_path):
    """A proposal shown while in Insert mode: Tab takes it (one undo step of its own), Esc dismisses the next."""
    start_stub(editor, tmp_path)
    editor.lua("vim.lsp.inline_completion.enable(false, {bufnr = 0})")  # no ghost text to give way to
    editor.nvim.input("1Gcwn")
    wait_for(lambda: shown(editor), 10, "the next edit")
    assert editor.mode() == "i" and editor.lines()[0] == "n = 1"
    editor.nvim.input("<Tab>")
    wait_for(lambda: editor.lines() == RENAMED, 5, "the accepted proposal")
    assert editor.mode() == "i"
    wait_for(lambda: shown(editor), 10, "the next proposal (the stub proposes again)")
    editor.nvim.input("<Esc>")
    wait_for(lambda: editor.mode() == "n" and not shown(editor), 5, "Esc to leave Insert mode and dismiss")
    assert editor.lines() == RENAMED
    editor.nvim.input("u")
    wait_for(lambda: editor.lines() == ["n = 1", "print(count)", "total = count + 1"], 5, "undo of the accept only")


def test_stub_typing_dismisses_and_asks_again(editor, tmp_path):
    start_stub(editor, tmp_path)
    rename_and_wait(editor)
    editor.nvim.input("A2")  # "n = 12"
    wait_for(lambda: not marks(editor), 5, "the proposal to go")
    assert editor.lines()[0] == "n = 12"
    requests = wait_for(lambda: len(events(tmp_path, "nextEdit")) >= 2 and events(tmp_path, "nextEdit"), 10,
                        "a new request after the pause")
    assert requests[1]["version"] > requests[0]["version"]


def test_stub_escape_and_the_command_dismiss(editor, tmp_path):
    start_stub(editor, tmp_path)
    rename_and_wait(editor)
    editor.nvim.input("<Esc>")
    wait_for(lambda: not shown(editor), 5, "Escape to dismiss")
    assert marks(editor) == [] and editor.lines()[1] == "print(count)"
    assert not editor.lua("return vim.fn.maparg('<Esc>', 'n') ~= ''")  # its mapping went with it
    editor.nvim.command("DgNextEdit")  # ask again, now
    wait_for(lambda: shown(editor), 10, "the invoked proposal")
    assert events(tmp_path, "nextEdit")[-1]["trigger"] == 1
    editor.nvim.command("DgNextEditDismiss")
    assert not shown(editor) and marks(editor) == []
    editor.nvim.input("<Tab>")  # nothing shown: Normal mode's <Tab> (jump forward), no edit
    assert editor.lines() == ["n = 1", "print(count)", "total = count + 1"]


def test_stub_a_stale_proposal_is_never_applied(editor, tmp_path):
    start_stub(editor, tmp_path)
    rename_and_wait(editor)
    # The buffer changes after the answer, and the accept comes before any autocommand could hide the proposal.
    editor.lua("vim.api.nvim_buf_set_lines(0, 2, 3, false, {'total = count + 2'})\n"
               "pcall(vim.cmd.DgNextEditAccept)")
    assert editor.lines() == ["n = 1", "print(count)", "total = count + 2"]
    assert "the buffer changed since it was proposed" in editor.messages()
    assert not shown(editor)
    assert not events(tmp_path, "nextEditAccepted")


def test_stub_tab_without_a_proposal_keeps_its_meaning(editor, tmp_path):
    """No proposal: Tab in Insert mode inserts a tab, and with ghost text shown it accepts the ghost text."""
    start_stub(editor, tmp_path, edits=[], stubText="42")
    editor.lua("vim.bo.expandtab = false; vim.bo.softtabstop = 0")
    editor.lua("require('dg').toggle(false)")  # no ghost text
    editor.nvim.input("1GA<Tab>x<Esc>")
    wait_for(lambda: editor.lines()[0] == "count = 1\tx", 5, "a literal tab")
    wait_for(lambda: editor.lua("require('dg').toggle(true); return true"), 1, "")
    editor.nvim.input("A ")
    wait_for(editor.ghost, 10, "ghost text")
    editor.nvim.input("<Tab>")
    wait_for(lambda: editor.lines()[0] == "count = 1\tx 42", 5, "the ghost text accepted")
    assert not shown(editor)


def test_stub_ghost_text_wins_over_a_proposal(editor, tmp_path):
    """A proposal answered before the ghost text goes when the ghost text comes; Tab then accepts the ghost text."""
    start_stub(editor, tmp_path, stubText="42", nextEditDebounceMs=0)
    editor.nvim.input("3GA ")
    wait_for(editor.ghost, 10, "ghost text")
    wait_for(lambda: not shown(editor), 5, "no proposal while ghost text is shown")
    editor.nvim.input("<Tab>")
    wait_for(lambda: editor.lines()[2] == "total = count + 1 42", 5, "the ghost text accepted")
    assert editor.lines()[:2] == ["count = 1", "print(count)"]


def test_stub_indicator_only_shows_a_sign_and_the_command_accepts(editor, tmp_path):
    start_stub(editor, tmp_path, nextEditIndicatorOnly=True)
    rename_and_wait(editor)
    assert marks(editor) == [{"row": 1, "col": 0, "sign": "»"}]
    assert not editor.lua("return vim.fn.maparg('<Tab>', 'n') ~= ''")  # Tab stays Tab
    editor.nvim.command("DgNextEditAccept")
    wait_for(lambda: editor.lines() == RENAMED, 5, "the accepted proposal")


def test_screenshot_script_captures_a_next_edit(tmp_path):
    need_program("tmux")
    pytest.importorskip("PIL", reason="Pillow not installed")
    from PIL import Image

    source, out, ansi = tmp_path / "demo.py", tmp_path / "shot.png", tmp_path / "shot.ansi"
    source.write_text(RENAME)
    settings = {"nextEditDebounceMs": 100, "stubNextEdit": RENAME_EDITS}
    proc = subprocess.run(
        [sys.executable, str(PLUGIN / "scripts" / "screenshot.py"), "--stub", "", "--next-edit", "1Gcwn<Esc>",
         "--source", str(source), "--settings", json.dumps(settings), "--out", str(out), "--ansi-out", str(ansi),
         "--timeout", "60", "--rows", "8"],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proposal = json.loads(proc.stdout.splitlines()[-1])["proposal"]
    assert [(e["text"], e["range"]) for e in proposal] == [(e["text"], e["range"]) for e in RENAME_EDITS]
    capture = ansi.read_text()
    plain = re.sub(r"\x1b\[[0-9;:]*m", "", capture)
    assert "print(countn)" in plain  # the old name, then the new one drawn after it
    # the old name struck through (SGR 9), the new one in a colour of its own
    assert re.search(r"\x1b\[(?:[0-9]+;)*9(?:;[0-9;]*)?m(\x1b\[[0-9;]*m)*count", capture), capture
    with Image.open(out) as img:
        assert img.size[0] > 600 and img.size[1] > 100


# --- against the real server and the shipped model --------------------------------------------------------------
# The shipped model was never trained for next edits: what it proposes is nonsense, but it proposes something in a
# plain-text file (no syntax gate) for a small edit with minConfidence 0, and the same inputs give the same
# proposal. The tests check how a proposal is drawn, applied and refused, with the proposal itself as the oracle.

NOTES = "shopping list\n- apples\n- pears\n- plums\n"
REAL_SETTINGS = {"minConfidence": 0, "nextEditDebounceMs": 100, "nextEditNoise": 0.25}

# Keeps every copilotInlineEdit answer and every workspace/executeCommand (with its answer) the client sent.
RECORD = """
_G.dg_nes = {answers = {}, commands = {}}
local client = vim.lsp.get_clients({name = 'dg', bufnr = 0})[1]
local request = client.request
client.request = function(self, method, params, handler, bufnr)
  if method == 'textDocument/copilotInlineEdit' or method == 'workspace/executeCommand' then
    local inner = handler
    handler = function(err, result, ctx)
      if method == 'workspace/executeCommand' then
        table.insert(_G.dg_nes.commands, {params = params, result = result, err = err})
      else
        table.insert(_G.dg_nes.answers, {version = params.textDocument.version, result = result, err = err})
      end
      if inner then return inner(err, result, ctx) end
    end
  end
  return request(self, method, params, handler, bufnr)
end
"""


def start_real(editor: Editor, name: str, text: str, **settings) -> None:
    editor.setup(REAL_CMD, {**REAL_SETTINGS, **settings})  # modelPath null: the shipped model
    editor.open(name, text)
    editor.wait_ready(REAL_READY_S * 3)
    editor.lua(RECORD)


def recorded(editor: Editor) -> dict:
    return editor.lua("return _G.dg_nes")


def applied(text: str, edits: list[dict]) -> list[str]:
    """The buffer's lines once `edits` are applied to `text` (the server's reading of positions)."""
    return apply(text, edits).rstrip("\n").split("\n")


def wait_shown(editor: Editor) -> dict:
    try:
        wait_for(lambda: shown(editor), REAL_FILL_S * 3, "a next edit from the shipped model")
    except AssertionError as e:
        raise AssertionError(f"{e}; answers: {recorded(editor)['answers']}") from None
    return editor.lua("local p = require('dg.nextedit').get(0); return {version = p.version, edits = p.edits}")


needs_model = pytest.mark.skipif(not (DEFAULT_MODEL / "config.json").exists(),
                                 reason="the shipped default model is not in engine/default_model")


@needs_model
def test_real_edit_shows_a_proposal_and_tab_accepts_it(editor):
    start_real(editor, "notes.txt", NOTES)
    editor.nvim.input("2G$x")  # "- apples" -> "- apple", in Normal mode
    proposal = wait_shown(editor)
    before = editor.lines()
    assert before == ["shopping list", "- apple", "- pears", "- plums"]
    assert proposal["edits"] and all(e["textDocument"]["version"] == proposal["version"] for e in proposal["edits"])
    assert proposal["version"] == editor.lua("return vim.lsp.util.buf_versions[vim.api.nvim_get_current_buf()]")
    assert marks(editor), "nothing drawn"
    assert tuple(editor.nvim.current.window.cursor) == (2, 6)  # where `x` left it
    expected = applied("\n".join(before) + "\n", proposal["edits"])
    editor.nvim.input("<Tab>")
    wait_for(lambda: editor.lines() == expected, 10, "the buffer to equal the proposal")
    [command] = wait_for(lambda: recorded(editor)["commands"], 10, "dg.acceptNextEdit")
    assert command["params"]["command"] == "dg.acceptNextEdit"
    assert command["params"]["arguments"][0]["version"] == proposal["version"]
    assert command["result"] == {"accepted": True}
    editor.nvim.input("<Esc>u")
    wait_for(lambda: editor.lines() == before, 5, "one undo to restore")


@needs_model
def test_real_typing_dismisses_the_proposal(editor):
    start_real(editor, "notes.txt", NOTES)
    editor.nvim.input("2G$x")
    wait_shown(editor)
    editor.nvim.input("ox")  # a new line below, in Insert mode
    wait_for(lambda: not marks(editor), 5, "the proposal to go")
    assert editor.lines() == ["shopping list", "- apple", "x", "- pears", "- plums"]
    editor.nvim.input("<Esc>")
    assert not recorded(editor)["commands"]


@needs_model
def test_real_a_stale_proposal_is_never_applied(editor):
    start_real(editor, "notes.txt", NOTES)
    editor.nvim.input("2G$x")
    wait_shown(editor)
    # the buffer changes after the answer; the accept comes before any autocommand could hide the proposal
    editor.lua("vim.api.nvim_buf_set_lines(0, 3, 4, false, {'- prunes'})\npcall(vim.cmd.DgNextEditAccept)")
    assert editor.lines() == ["shopping list", "- apple", "- pears", "- prunes"]
    assert "the buffer changed since it was proposed" in editor.messages()
    assert not shown(editor) and not marks(editor)
    assert not recorded(editor)["commands"]


@needs_model
def test_real_tab_without_a_proposal_inserts_a_tab(editor):
    """A Python edit the shipped model's proposal would break (the syntax gate withholds it): no proposal, and Tab
    keeps its meaning."""
    start_real(editor, "count.py", "count = 1\nprint(count)\ntotal = count + 1\n", nextEditNoise=0.5)
    editor.lua("vim.bo.expandtab = false; vim.bo.softtabstop = 0; vim.lsp.inline_completion.enable(false, {bufnr = 0})")
    editor.nvim.input("1Gcwn<Esc>")
    answer = wait_for(lambda: recorded(editor)["answers"], REAL_FILL_S * 3, "the next-edit answer")[-1]
    assert answer["result"] == {"edits": []}, answer
    assert not shown(editor)
    editor.nvim.input("3GI<Tab><Esc>")
    wait_for(lambda: editor.lines()[2] == "\ttotal = count + 1", 5, "a literal tab")
