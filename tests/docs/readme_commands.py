"""The README's user sections read as the tests see them: the part before "# For developers", its fenced shell
commands (one per line, backslash continuations joined, comments dropped) and its fenced JSON settings; and the
sandbox the commands run in (tests/docs/test_readme_commands.py): a fresh HOME, and on PATH either the real
`dg-lsp` (this checkout's server) or recorders that write down what a command was asked to do (`hf`, `vllm`,
`code`, `pipx`, `dg-lsp`) where running it for real would download gigabytes or needs a GPU."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DEVELOPER_PART = "\n# For developers"
SHELL_LANGS = {"sh", "bash", "shell", "console"}


def user_part(text: str | None = None) -> str:
    text = README.read_text() if text is None else text
    cut = text.find(DEVELOPER_PART)
    assert cut > 0, f"README.md has no '{DEVELOPER_PART.strip()}' heading: the user part has no end"
    return text[:cut]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every ``` block."""
    return [(m.group(1).strip(), m.group(2)) for m in re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.M | re.S)]


def strip_comment(line: str) -> str:
    """The line without a trailing `# ...` comment outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


@dataclass(frozen=True)
class Command:
    text: str
    block: int  # which shell block (exports of earlier lines of the same block hold for it)


def shell_commands(text: str | None = None) -> list[Command]:
    out: list[Command] = []
    blocks = [body for lang, body in fenced_blocks(user_part(text)) if lang in SHELL_LANGS]
    for i, body in enumerate(blocks):
        joined = re.sub(r"\\\n\s*", " ", body)
        out += [Command(c, i) for line in joined.splitlines() if (c := strip_comment(line).strip())]
    return out


def json_settings(text: str | None = None) -> list[dict]:
    """Every ```json block of the user part, read as the members of a settings.json object."""
    return [json.loads("{" + body.strip().rstrip(",") + "}")
            for lang, body in fenced_blocks(user_part(text)) if lang == "json"]


RECORDER = '''#!{python}
"""Records one call of `{name}` as a JSON line in $DG_RECORD; for hf, hf's own command line is parsed and the
download it would start is recorded instead of run."""
import json, os, sys
name = {name!r}
rec = {{"name": name, "argv": sys.argv[1:], "env": {{k: v for k, v in os.environ.items() if k.startswith("VLLM_")}}}}
if name == "hf":
    import warnings
    import huggingface_hub.cli.download as d
    def snapshot_download(**kw):
        rec["call"] = {{"fn": "snapshot_download", **{{k: kw.get(k) for k in ("repo_id", "allow_patterns",
                                                                        "ignore_patterns", "local_dir")}}}}
        return str(kw.get("local_dir"))
    def hf_hub_download(**kw):
        rec["call"] = {{"fn": "hf_hub_download", **{{k: kw.get(k) for k in ("repo_id", "filename", "local_dir")}}}}
        return str(kw.get("local_dir"))
    d.snapshot_download, d.hf_hub_download = snapshot_download, hf_hub_download
    from huggingface_hub.cli.hf import main
    sys.argv = ["hf"] + sys.argv[1:]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            main()
            rec["exit"] = 0
        except SystemExit as e:
            rec["exit"] = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    rec["warnings"] = [str(w.message) for w in seen]
with open(os.environ["DG_RECORD"], "a") as f:
    f.write(json.dumps(rec) + "\\n")
'''


def write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@dataclass(frozen=True)
class Sandbox:
    home: Path
    work: Path  # an empty folder: the working directory (dg-lsp --check indexes it)
    real_bin: Path  # dg-lsp: this checkout's server
    record_bin: Path  # recorders for hf, vllm, code, pipx, dg-lsp
    record: Path

    @classmethod
    def make(cls, tmp: Path) -> Sandbox:
        box = cls(tmp / "home", tmp / "work", tmp / "bin", tmp / "record-bin", tmp / "record.jsonl")
        for d in (box.home, box.work, box.real_bin, box.record_bin):
            d.mkdir()
        write_exe(box.real_bin / "dg-lsp", f'#!/bin/sh\nexec "{sys.executable}" -m dg_lsp "$@"\n')
        for name in ("hf", "vllm", "code", "pipx", "dg-lsp"):
            write_exe(box.record_bin / name, RECORDER.format(python=sys.executable, name=name))
        return box

    def env(self, recorded: bool) -> dict[str, str]:
        first = self.record_bin if recorded else self.real_bin
        path = os.pathsep.join([str(first), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        return dict(os.environ, HOME=str(self.home), PATH=path, DG_RECORD=str(self.record),
                    PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")

    def recorded(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]
