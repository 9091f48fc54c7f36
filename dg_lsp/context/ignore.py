"""Which workspace files the index skips: `.gitignore` rules, plus directories no project wants indexed.

The subset of gitignore(5) honoured: blank lines and `#` comments; `!` negation; a trailing `/` (directories only);
a leading or inner `/` anchors the pattern to the .gitignore's directory, else it matches a name at any depth; `*`,
`?`, `[...]` within one path segment and `**` across segments. Each directory's own .gitignore applies below it, a
later rule winning over an earlier one. Not honoured: `.git/info/exclude`, the global excludes file, escaped
`\\#`/`\\!` and trailing spaces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Never indexed, whatever .gitignore says: version control, dependencies, caches, build outputs.
ALWAYS = frozenset(".git .hg .svn node_modules __pycache__ .venv venv .tox .mypy_cache .pytest_cache .ruff_cache "
                   "dist build target .next .cache .idea .vscode-test".split())


@dataclass(frozen=True)
class Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _translate(pat: str) -> str:
    out, i = [], 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pat.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pat.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pat[i + 1:j].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse_rules(text: str) -> list[Rule]:
    rules = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line[1:] if negate else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        body = _translate(line.lstrip("/"))
        rules.append(Rule(re.compile(("" if anchored else "(?:.*/)?") + body + "$"), negate, dir_only))
    return rules


class Ignore:
    """The rules in force for files under one root: `ignored(rel, is_dir)` with `rel` relative to the root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._rules: dict[str, list[Rule]] = {}  # directory (relative, "" for the root) -> its .gitignore's rules

    def enter(self, rel_dir: str) -> None:
        """Read the .gitignore of a directory about to be listed (the walk calls this top-down)."""
        f = self.root / rel_dir / ".gitignore"
        try:
            if f.is_file() and f.stat().st_size < 1 << 20:
                self._rules[rel_dir] = parse_rules(f.read_text("utf-8", "replace"))
        except OSError:
            pass

    def ignored(self, rel: str, is_dir: bool) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if is_dir and name in ALWAYS:
            return True
        verdict = False
        parts = rel.split("/")
        for depth in range(len(parts)):  # the root's rules first, the nearest directory's last (they win)
            base = "/".join(parts[:depth])
            rules = self._rules.get(base)
            if not rules:
                continue
            sub = "/".join(parts[depth:])
            for r in rules:
                if (not r.dir_only or is_dir) and r.regex.match(sub):
                    verdict = not r.negate
        return verdict
