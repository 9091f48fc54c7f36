"""Which context from other files one hole gets, within a token budget.

Candidates, best first:
1. identifiers near the hole (NEAR_BEFORE lines above to NEAR_AFTER below) and in the signatures of the enclosing
   definitions, nearest first, resolved through the file's imports to definitions in the index (`mod.f` through
   `import mod`, `g` through `from m import f as g`, a class's members through `Class.member`);
2. what the whole file uses from its imports, most used first (a call counts CALL_WEIGHT mentions: a call needs the
   signature, a mention only the name), as short stubs (the call being typed is often one);
3. the same names defined at top level elsewhere in the workspace, when few files define them (a fallback for
   imports the index cannot resolve: packages outside the workspace, Go/Rust/Java imports, C headers);
4. windows of WINDOW lines from other open documents, by Jaccard similarity of their identifier sets to the lines
   before the hole (as Copilot's neighbouring-tab snippets).
Constants of either group come after all the rest (their name says most of what they are). Duplicates go (a method
whose class is shown, the same definition twice, a name a file defines twice: its first); the rest fill the budget in
rank order, then are laid out in a stable order (dg_lsp.context.layout). Everything here runs on the event loop per
keystroke: window identifier sets and token counts are cached.
"""

from __future__ import annotations

import keyword
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dg_lsp.context.index import EXTENSIONS, MAX_LINE_CHARS, WorkspaceIndex, module_stem
from dg_lsp.context.layout import Snippet, cost, header, render, smaller
from dg_lsp.context.symbols import Definition, Import, imports
from dg_lsp.languages import parser

Encode = Callable[[str], list[int]]
NEAR_BEFORE, NEAR_AFTER = 12, 3
SCOPE_SCAN, SCOPE_CHARS = 200, 16384  # lines (and characters) scanned back for enclosing signatures
FALLBACK_FILES = 3  # a name defined in more files than this is too common to guess
WINDOW, WINDOW_STEP, MAX_WINDOWS = 30, 15, 400
MIN_JACCARD = 0.2
SIMILAR_MAX = 2
MODULE_DEFS = 8
CALL_WEIGHT = 4  # a name called counts this many uses: a call needs the signature, a mention only the name
HEAD_CHARS = 16384
USES_CHARS, USES_MAX, USES_SCAN = 2048, 64, 100_000
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEF_LINE = re.compile(r"^\s*(?:async\s+|pub\s+|export\s+|static\s+|public\s+|private\s+)*"
                       r"(?:def|class|function|fn|func|interface|impl|struct|trait)\b")
STOP = frozenset(keyword.kwlist) | frozenset(
    "self cls this None True False true false null undefined new return const let var function int str list dict "
    "set tuple len range print bool float object string void char auto".split())


@dataclass(frozen=True)
class Choice:
    snippets: list[Snippet]
    tokens: int


class Selector:
    """Per session: caches of token counts and window identifier sets (bounded)."""

    def __init__(self, index: WorkspaceIndex) -> None:
        self.index = index
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._used: dict[str, tuple[tuple[int, int], list[tuple[str, str, Definition]]]] = {}
        self._rel: dict[str, str] = {}
        self._short: dict[str, tuple[int, str]] = {}
        self._choices: OrderedDict[tuple, Choice] = OrderedDict()
        self._heads: dict[str, tuple[str, dict[str, Import]]] = {}
        self._windows: OrderedDict[tuple[str, int], list[tuple[int, frozenset[str]]]] = OrderedDict()
        self._near: tuple[str, frozenset[str]] = ("", frozenset())  # the text above the last hole's line, its words
        self._scope: list = []  # neighbourhood's last scan for enclosing signatures

    def count(self, text: str, encode: Encode) -> int:
        n = self._counts.get(text)
        if n is None:
            n = self._counts[text] = len(encode(text))
            while len(self._counts) > 4096:
                self._counts.popitem(last=False)
        return n

    def relpath(self, path: str) -> str:
        got = self._rel.get(path)
        if got is None:
            got = next((Path(path).relative_to(r).as_posix() for r in self.index.roots
                        if Path(path).is_relative_to(r)), Path(path).name)
            if len(self._rel) > 4096:
                self._rel.clear()
            self._rel[path] = got
        return got

    def short(self, path: str) -> str:
        """The path a prompt's header shows: the shortest suffix of `path` (whole folders) that no other file of the
        workspace ends with (`exceptions.py`, `gen/__init__.py`); a header costs a few tokens per file, and a small
        budget holds more definitions with short ones. Cached per file and the number of same-named files."""
        stem = module_stem(path)
        same = self.index.by_stem.get(stem, ())
        got = self._short.get(path)
        if got is not None and got[0] == len(same):
            return got[1]
        rel = self.relpath(path)
        parts = rel.split("/")
        least = 2 if stem != Path(path).stem else 1  # a package's __init__/index file: with its folder
        shown = rel
        for n in range(least, len(parts)):
            tail = "/".join(parts[-n:])
            if not any(p != path and p.endswith("/" + tail) for p in same):
                shown = tail
                break
        if len(self._short) > 4096:
            self._short.clear()
        self._short[path] = (len(same), shown)
        return shown

    # -- candidates ---------------------------------------------------------------------------------------------

    def _uses(self, path: str, text: str, binds: dict[str, Import]) -> list[tuple[str, str, Definition]]:
        """Definitions of other files that `text` names through its imports (`f` from `from m import f`,
        `mod.g` through `import m as mod`), most often named first, as (name used, file, definition); cached per file
        and size (USES_CHARS)."""
        key = (len(text) // USES_CHARS, len(binds))
        got = self._used.get(path)
        if got is not None and got[0] == key:
            return got[1]
        counts: dict[str, int] = {}
        for m in _IDENT.finditer(text, 0, USES_SCAN):  # a huge file: its head (a keystroke may pay for a miss)
            parts = m.group().split(".")
            for n in (1, 2):  # `f` and `mod.g` (a deeper chain: its first two parts)
                if len(parts) >= n and parts[0] in binds:
                    k = ".".join(parts[:n])
                    called = n == len(parts) and text.startswith("(", m.end())
                    counts[k] = counts.get(k, 0) + (CALL_WEIGHT if called else 1)
        out: list[tuple[str, str, Definition]] = []
        for name, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:USES_MAX]:
            out += [(name, f, d) for f, d, why in self.resolve(path, name, binds) if why == "import"]
        self._used[path] = (key, out)
        while len(self._used) > 64:
            self._used.pop(next(iter(self._used)))
        return out

    def _def_snippets(self, path: str, d: Definition, why: str, members: bool = True) -> list[Snippet]:
        """The definition's stub, then its smaller forms (layout.smaller): one of them is chosen, the largest that
        fits."""
        entry = self.index.entry(path)
        key = entry.key if entry else "python"
        shown = self.index.members(path, d.name) if d.kind == "class" and members else []
        rel, short = self.relpath(path), self.short(path)
        return [Snippet(rel, d.line, render(d, key, shown), key, why, d.name, "whole", short)] + [
            Snippet(rel, d.line, text, key, why, d.name, "signature", short) for text in smaller(d, key, shown)]

    def binds(self, path: str, text: str) -> dict[str, Import]:
        """The names `path`'s imports bind: from the index, else (a file it has not reached, an unsaved one) parsed
        from the head of `text` (imports sit there; the parse is bounded by HEAD_CHARS), cached per head."""
        entry = self.index.entry(path)
        if entry is not None:
            return {i.local: i for i in self.index.file_imports(path)}
        head = text[:HEAD_CHARS]
        got = self._heads.get(path)
        if got is None or got[0] != head:
            key = EXTENSIONS.get(Path(path).suffix)
            long_line = any(len(line) > MAX_LINE_CHARS for line in head.split("\n"))  # never natively parsed
            p = parser(key) if key and not long_line else None
            data = head.encode("utf-8", "surrogatepass")
            found = imports(p.parse(data), key, data) if p is not None else []
            got = self._heads[path] = (head, {i.local: i for i in found})
            while len(self._heads) > 64:
                self._heads.pop(next(iter(self._heads)))
        return got[1]

    def resolve(self, path: str, name: str, binds: dict[str, Import]) -> list[tuple[str, Definition, str]]:
        """(file, definition, why) for a dotted name used in `path`."""
        entry = self.index.entry(path)
        parts = name.split(".")
        for n in range(len(parts), 0, -1):  # the longest bound prefix: `import a.b` binds "a.b"
            imp = binds.get(".".join(parts[:n]))
            if imp is None:
                continue
            rest = parts[n:]
            files = self.index.module_files(imp.module, path)
            if imp.name and imp.name != "default":  # a default import: its module's listing
                found = [(f, d) for f in files for d in self.index.defined_in(f, imp.name)]
                if not found:  # `from pkg import mod`: a module
                    files = self.index.module_files(f"{imp.module.rstrip('.')}.{imp.name}" if
                                                    not imp.module.endswith(".") else imp.module + imp.name, path)
                else:
                    out = [(f, d, "import") for f, d in found]
                    if rest and found[0][1].kind == "class":
                        out += [(f, m, "import") for f, d in found for m in self.index.members(f, d.name)
                                if m.name == rest[0]]
                    return out
            if rest:
                return [(f, d, "import") for f in files for d in self.index.defined_in(f, rest[0])]
            # the module itself (`mod.` typed, the member not yet): its first top-level functions and classes
            return [(f, d, "module") for f in files[:1] for d in self.index.top(f)[:MODULE_DEFS]]
        head = parts[0]
        if head in STOP or (entry is not None and self.index.defines(path, head)):
            return []
        where = [(f, d) for f, d in self.index.named(head) if not d.parent and f != path]
        if not where or len({f for f, _ in where}) > FALLBACK_FILES:
            return []
        return [(f, d, "name") for f, d in where]

    def _similar(self, here: str, near: frozenset[str], others: list[tuple[str, int, str]]) -> list[Snippet]:
        scored = []
        for path, version, text in others:
            if path == here:
                continue
            key = (path, version)
            wins = self._windows.get(key)
            if wins is None:
                lines = text.splitlines()
                wins = [(i, frozenset(_WORD.findall("\n".join(lines[i:i + WINDOW]))))
                        for i in range(0, max(len(lines) - WINDOW // 2, 1), WINDOW_STEP)][:MAX_WINDOWS]
                self._windows[key] = wins
                while len(self._windows) > 64:
                    self._windows.popitem(last=False)
            for i, ids in wins:
                union = len(ids | near)
                j = len(ids & near) / union if union else 0.0
                if j >= MIN_JACCARD:
                    scored.append((j, path, i, text))
        scored.sort(key=lambda x: -x[0])
        out = []
        for _, path, i, text in scored[:SIMILAR_MAX]:
            lines = text.splitlines()[i:i + WINDOW]
            out.append(Snippet(self.relpath(path), i, "\n".join(lines), _key_of(path), "similar", kind="window",
                               shown=self.short(path)))
        return out

    # -- the choice ---------------------------------------------------------------------------------------------

    def select(self, path: str, text: str, offset: int, budget: int, encode: Encode,
               others: list[tuple[str, int, str]] = ()) -> Choice:
        """Snippets for a hole at `offset` of `text` (the file at `path`) worth at most `budget` tokens; `others`:
        (path, version, text) of open documents for similar windows."""
        if budget <= 0:
            return Choice([], 0)
        names = neighbourhood(text, offset, self._scope)
        binds = self.binds(path, text)
        uses = self._uses(path, text, binds)
        line_start = text.rfind("\n", 0, offset) + 1
        above = text[max(0, line_start - 2000):line_start]
        if self._near[0] != above:  # stable on a line: computed once per line typed on
            self._near = (above, frozenset(_WORD.findall(above)) - STOP)
        near = self._near[1]
        key = (path, tuple(names), budget, tuple(u[0] for u in uses), self.index.generation, near,
               tuple((p, v) for p, v, _ in others))
        got = self._choices.get(key)
        if got is not None:  # the same inputs (typing inside a word, a repeated request): the same choice
            return got
        seen: set[tuple[str, int]] = set()
        ranked: list[list[Snippet]] = []  # per candidate: its forms, largest first
        classes: set[tuple[str, str]] = set()
        named: set[tuple[str, str, str]] = set()
        constants = []  # a constant (`logger`, `PIPE`) is read more than called, its name says most: after the rest
        for name in names:
            for f, d, why in self.resolve(path, name, binds):
                if (f, d.line) in seen or (f, d.parent) in classes or (f, d.parent, d.name) in named:
                    continue  # the same name twice in a file (`if`/`else` variants, overloads): the first
                seen.add((f, d.line))
                named.add((f, d.parent, d.name))
                if d.kind == "class":
                    classes.add((f, d.name))
                (constants if d.kind == "constant" else ranked).append(self._def_snippets(f, d, why))
        for _, f, d in uses:  # what the file uses from other files, nearest used first, as short stubs
            if (f, d.line) not in seen and (f, d.parent) not in classes and (f, d.parent, d.name) not in named:
                seen.add((f, d.line))
                named.add((f, d.parent, d.name))
                (constants if d.kind == "constant" else ranked).append(self._def_snippets(f, d, "used", members=False))
        # stable: imports near the hole first, then what the file uses from its imports (certain, where a same-named
        # definition elsewhere is a guess), each group nearest / most used first; constants after all of them
        order = {"import": 0, "used": 1, "name": 2, "module": 3}
        ranked.sort(key=lambda forms: order.get(forms[0].why, 4))
        constants.sort(key=lambda forms: order.get(forms[0].why, 4))
        ranked += constants
        ranked += [[s] for s in self._similar(path, near, list(others))]
        chosen, used = self._fit(ranked, self.short(path), _key_of(path), budget, encode)
        self._choices[key] = choice = Choice(chosen, used)
        while len(self._choices) > 64:
            self._choices.popitem(last=False)
        return choice


    def _fit(self, ranked: list[list[Snippet]], current: str, key: str, budget: int,
             encode: Encode) -> tuple[list[Snippet], int]:
        """Ten signatures beat two stubs: in rank order, each candidate's smallest form that still fits; then, in
        rank order again, each chosen one grown to its largest form that fits what is left. Counted with the
        layout's headers (each file's and the current file's), then checked exactly (layout.cost), the last
        chosen dropped while it is over: `budget` is a hard cap."""
        files: set[str] = set()
        est = self.count(header(current, key), encode) + 1  # the current file's header (or separator and path)
        picked: list[tuple[list[Snippet], int]] = []  # (forms, index of the form chosen)

        def size(s: Snippet) -> int:
            return self.count(s.text, encode) + 1  # + the blank line after it

        for forms in ranked:
            s = forms[-1]
            n = size(s) + (0 if s.path in files else self.count(header(s.shown or s.path, s.key), encode) + 1)
            if est + n <= budget:
                picked.append((forms, len(forms) - 1))
                files.add(s.path)
                est += n
        for i, (forms, at) in enumerate(picked):
            for j in range(at):
                grow = size(forms[j]) - size(forms[at])
                if est + grow <= budget:
                    picked[i] = (forms, j)
                    est += grow
                    break
        chosen = [forms[at] for forms, at in picked]
        used = cost(chosen, current, key, encode)
        while used > budget:
            chosen.pop()
            used = cost(chosen, current, key, encode)
        return chosen, used


def neighbourhood(text: str, offset: int, memo: list | None = None) -> list[str]:
    """Dotted identifiers near `offset`, nearest first, then those of enclosing signatures; no duplicates. `memo`: a
    one-slot list the caller keeps, holding the last enclosing-signature scan (the lines above the cursor's line do
    not change while the user types on it)."""
    start = offset
    for _ in range(NEAR_BEFORE):
        start = text.rfind("\n", 0, max(start - 1, 0)) + 1 if start > 0 else 0
    end = offset
    for _ in range(NEAR_AFTER + 1):
        nl = text.find("\n", end + 1)
        end = len(text) if nl < 0 else nl
    found: dict[str, int] = {}
    for m in _IDENT.finditer(text, start, end):
        name = m.group()
        if m.start() < offset <= m.end():  # the word being typed: only its complete part (stable per keystroke)
            name = name[: offset - m.start()].rpartition(".")[0]
            if not name:
                continue
        dist = abs(m.start() - offset) if m.start() < offset else 2 * (m.start() - offset)
        if name not in found or dist < found[name]:
            found[name] = dist
    line_start = text.rfind("\n", 0, offset) + 1
    indent = len(text[line_start:offset]) - len(text[line_start:offset].lstrip())
    above = text[max(0, line_start - SCOPE_CHARS):line_start]
    if memo is not None and memo and memo[0][:2] == (indent, above):
        scope = memo[0][2]
    else:
        scope = enclosing(above, indent)
        if memo is not None:
            memo[:] = [(indent, above, scope)]
    for name, rank in scope:
        found.setdefault(name, rank)
    return [n for n, _ in sorted(found.items(), key=lambda x: x[1]) if n.split(".")[0] not in STOP]


def enclosing(above: str, indent: int) -> list[tuple[str, int]]:
    """Identifiers of the signatures enclosing a line indented by `indent` that follows `above` (lines above with
    less indentation that open a definition, at most SCOPE_SCAN lines up), each with its rank (nearest first)."""
    out: list[tuple[str, int]] = []
    pos, scanned = len(above), 0
    while pos > 0 and scanned < SCOPE_SCAN and indent > 0:
        prev = above.rfind("\n", 0, pos - 1) + 1
        line = above[prev:pos]
        scanned += 1
        pos = prev
        lead = len(line) - len(line.lstrip())
        if line.strip() and lead < indent and _DEF_LINE.match(line):
            indent = lead
            out += [(m.group(), 10_000 + scanned) for m in _IDENT.finditer(line)]
    return out


def _key_of(path: str) -> str:
    return EXTENSIONS.get(Path(path).suffix, "python")
