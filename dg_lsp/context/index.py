"""The workspace index: definitions and imports of every source file under the workspace folders, plus the open
documents, kept current from document events and watched-file events.

Built in small steps on the event loop (`step(deadline)`), never in a thread: tree-sitter holds the GIL while it
parses, so a thread would stall the loop anyway, and a step can stop on time: a big file is parsed in resumable
slices (dg_lsp.languages.parse_until) and the walk of directories stops at the deadline. Caps: at most `max_files`
files, none over `max_file_bytes`, none with a line over MAX_LINE_CHARS (minified or generated code; native parsing
is never run on unbounded input).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import tree_sitter

from dg_lsp.context.ignore import Ignore
from dg_lsp.context.resolve import Resolver
from dg_lsp.context.symbols import Definition, Import, definition_steps, imports
from dg_lsp.languages import parse_until, parser

MAX_LINE_CHARS = 4000
# file extension -> grammar key (files on disk have no languageId)
EXTENSIONS = {".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
              ".jsx": "javascript", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
              ".rs": "rust", ".go": "go", ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp",
              ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp"}


class FileEntry(NamedTuple):
    """A file's definitions and imports as plain tuples (Definition._make / Import._make read them): Python's
    collector stops tracking an exact tuple of strings and ints, never a NamedTuple instance, and an index of
    100,000 tracked definitions made every full collection a long pause of the event loop."""

    path: str
    key: str  # grammar key
    defs: tuple[tuple, ...]
    imports: tuple[tuple, ...]


@dataclass
class _Parse:
    """A file being parsed in slices."""

    path: str
    key: str
    data: bytes
    parser: tree_sitter.Parser = field(repr=False)
    tree: tree_sitter.Tree | None = None
    defs: list[Definition] = field(default_factory=list)
    steps: Iterator[None] | None = None  # the walk for definitions, once parsed


def module_stem(path: str) -> str:
    """The name a file is imported by: its file name without extension; a package's __init__/index: its folder."""
    p = Path(path)
    return p.parent.name if p.stem in ("__init__", "index", "mod") else p.stem


class WorkspaceIndex:
    def __init__(self, roots: list[Path], max_files: int = 5000, max_file_bytes: int = 256 * 1024,
                 read_open: Callable[[str], tuple[str, str] | None] | None = None) -> None:
        """`read_open(path)`: (grammar key, text) of an open document at `path` (its text wins over the disk's)."""
        self.roots = [r.resolve() for r in roots]
        self.max_files, self.max_file_bytes = max_files, max_file_bytes
        self.read_open = read_open or (lambda path: None)
        self.files: dict[str, FileEntry] = {}
        self.by_name: dict[str, tuple[tuple[str, tuple], ...]] = {}  # name -> (path, plain definition)
        self.by_stem: dict[str, set[str]] = {}
        self.skipped = 0  # files left out by the caps
        self.seen = 0  # source files found by the walk
        self._queue: deque[str] = deque()  # paths to (re)index, editor events first
        self._queued: set[str] = set()
        self._walk: Iterator[str] | None = self._walker()
        self._parse: _Parse | None = None
        self._tables: dict[str, dict[str, list[Definition]]] = {}
        self.generation = 0  # changes whenever a file's entry does (selection caches key on it)
        self.resolver = Resolver(self.roots, self.files.keys(), self.by_stem)

    # -- state ----------------------------------------------------------------------------------------------------

    @property
    def building(self) -> bool:
        """Work is left: the first walk is not over, or files wait to be (re)indexed."""
        return self._walk is not None or bool(self._queue) or self._parse is not None

    @property
    def pending(self) -> int:
        """Files waiting to be (re)indexed after an editor or file event (not the first walk's)."""
        return len(self._queue) + (self._parse is not None and self._walk is None)

    def entry(self, path: str) -> FileEntry | None:
        return self.files.get(path)

    def mark(self, path: str) -> None:
        """(Re)index `path` soon (an edited, saved, closed, created or changed file)."""
        if path not in self._queued and Path(path).suffix in EXTENSIONS:
            self._queued.add(path)
            self._queue.appendleft(path)

    def remove(self, path: str) -> None:
        old = self.files.pop(path, None)
        self._tables.pop(path, None)
        self.generation += 1
        if old is None:
            return
        for name in {d[0] for d in old.defs}:
            lst = self.by_name.get(name)
            if lst is not None:
                lst = tuple(x for x in lst if x[0] != path)
                if lst:
                    self.by_name[name] = lst
                else:
                    del self.by_name[name]
        stems = self.by_stem.get(module_stem(path))
        if stems is not None:
            stems.discard(path)

    def _put(self, entry: FileEntry) -> None:
        self.remove(entry.path)
        if len(self.files) >= self.max_files:
            self.skipped += 1
            return
        self.files[entry.path] = entry
        self.generation += 1
        for d in entry.defs:  # tuples, not lists: untracked by the collector (see FileEntry)
            self.by_name[d[0]] = self.by_name.get(d[0], ()) + ((entry.path, d),)
        self.by_stem.setdefault(module_stem(entry.path), set()).add(entry.path)

    def under_root(self, path: str) -> bool:
        return any(Path(path).is_relative_to(r) for r in self.roots)

    # -- building ----------------------------------------------------------------------------------------------------

    def _walker(self) -> Iterator[str]:
        """Source files under the roots, breadth-first per root, .gitignore honoured."""
        for root in self.roots:
            ignore = Ignore(root)
            dirs = deque([""])
            while dirs:
                rel_dir = dirs.popleft()
                ignore.enter(rel_dir)
                try:
                    with os.scandir(root / rel_dir) as it:
                        found = sorted(it, key=lambda e: e.name)
                except OSError:
                    continue
                for e in found:
                    rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
                    try:
                        is_dir = e.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    if ignore.ignored(rel, is_dir):
                        continue
                    if is_dir:
                        dirs.append(rel)
                    elif os.path.splitext(e.name)[1] in EXTENSIONS:
                        yield e.path
                    yield ""  # a step may stop between any two entries

    def step(self, deadline: float, clock: Callable[[], float]) -> bool:
        """Index until `clock()` passes `deadline`; True when nothing is left to do."""
        while clock() < deadline:
            if self._parse is not None:
                self._continue_parse(deadline)
                continue
            if self._queue:
                path = self._queue.popleft()
                self._queued.discard(path)
                self._start(path)
                continue
            if self._walk is None:
                return True
            path = next(self._walk, None)
            if path is None:
                self._walk = None
            elif path:
                self.seen += 1
                if len(self.files) >= self.max_files:
                    self.skipped += 1
                elif path not in self.files and not self._start(path):
                    self.skipped += 1
        return not self.building

    def build(self) -> None:
        """Index everything now (benchmarks and tests; the server steps)."""
        while self.step(float("inf"), lambda: 0.0) is False:
            pass

    def _read(self, path: str) -> tuple[str, bytes] | None:
        key = EXTENSIONS.get(Path(path).suffix)
        got = self.read_open(path)
        if got is not None:
            key, text = got[0], got[1]
            data = text.encode("utf-8", "surrogatepass")
        else:
            try:
                if key is None or os.path.getsize(path) > self.max_file_bytes:
                    return None
                with open(path, "rb") as f:
                    data = f.read(self.max_file_bytes + 1)
            except OSError:
                return None
        if key is None or len(data) > self.max_file_bytes:
            return None
        if any(len(line) > MAX_LINE_CHARS for line in data.split(b"\n")):
            return None
        return key, data

    def _start(self, path: str) -> bool:
        """Start indexing `path`; False when it is left out (gone, too big, a line too long, no grammar)."""
        got = self._read(path)
        p = parser(got[0]) if got is not None else None
        if got is None or p is None:
            self.remove(path)
            return False
        self._parse = _Parse(path, got[0], got[1], p)
        return True

    def _continue_parse(self, deadline: float) -> None:
        job = self._parse
        assert job is not None
        if job.tree is None:
            job.tree = parse_until(job.parser, job.data, deadline=None if deadline == float("inf") else deadline)
            if job.tree is None:
                return  # out of time; the next step resumes this parse
            job.steps = definition_steps(job.tree, job.key, job.data, job.defs)
            return
        assert job.steps is not None
        clock = time.perf_counter
        for _ in job.steps:
            if clock() > deadline:
                return  # the next step resumes the walk
        self._parse = None
        self._put(FileEntry(job.path, job.key, tuple(map(tuple, job.defs)),
                            tuple(map(tuple, imports(job.tree, job.key, job.data)))))

    # -- lookups ------------------------------------------------------------------------------------------------------

    def module_files(self, module: str, importer: str) -> list[str]:
        """Indexed files an import's module names, found as the importer's language finds it
        (dg_lsp.context.resolve)."""
        return self.resolver.module_files(module, importer)

    def _lookup(self, path: str) -> dict[str, list[Definition]]:
        """name -> top-level definitions and "parent." + name -> members, per file, built on first use (a
        keystroke's selection asks a few files for dozens of names)."""
        table = self._tables.get(path)
        if table is None:
            table = {}
            entry = self.files.get(path)
            for d in map(Definition._make, entry.defs if entry is not None else ()):
                table.setdefault(f"{d.parent}.{d.name}" if d.parent else d.name, []).append(d)
                if d.parent:
                    table.setdefault(f"{d.parent}.", []).append(d)
            self._tables[path] = table
            while len(self._tables) > 256:
                self._tables.pop(next(iter(self._tables)))
        return table

    def defines(self, path: str, name: str) -> bool:
        """Does `path` define `name` (at any level)?"""
        table = self._lookup(path)
        return name in table

    def defined_in(self, path: str, name: str) -> list[Definition]:
        return self._lookup(path).get(name, [])

    def members(self, path: str, parent: str) -> list[Definition]:
        return self._lookup(path).get(f"{parent}.", [])

    def top(self, path: str) -> list[Definition]:
        """A file's top-level functions, classes and types."""
        entry = self.files.get(path)
        return [] if entry is None else [d for d in map(Definition._make, entry.defs)
                                         if not d.parent and d.kind != "constant"]

    def named(self, name: str) -> list[tuple[str, Definition]]:
        """(file, definition) for every definition called `name`."""
        return [(f, Definition._make(d)) for f, d in self.by_name.get(name, ())]

    def file_imports(self, path: str) -> list[Import]:
        entry = self.files.get(path)
        return [] if entry is None else list(map(Import._make, entry.imports))
