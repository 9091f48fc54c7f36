"""The session's workspace context: the index of the workspace folders (built and kept current in the background,
on the event loop, in slices while the server is idle) and the per-hole selection wired into the fill pipeline.

The session calls `start` once the client said its folders, `opened`/`changed`/`closed`/`saved` from document
sync, `files_changed` from workspace/didChangeWatchedFiles, and passes `related` to dg_lsp.fill.pipeline.run_fill.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pygls.uris import to_fs_path

from dg_lsp.context.index import EXTENSIONS, WorkspaceIndex
from dg_lsp.context.layout import Snippet
from dg_lsp.context.select import Selector
from dg_lsp.documents import DocumentStore, Snapshot
from dg_lsp.languages import grammar_key

log = logging.getLogger(__name__)
SLICE_S = 0.001  # one step of indexing (a file's parse resumes across steps)
CHANGE_QUIET_S = 0.5
RECENT = 20  # documents remembered for similar windows (open or recently edited)


def uri_path(uri: str) -> str | None:
    """The file-system path of a file: URI (resolved, as the index names files); None for other schemes."""
    if not uri.startswith("file:"):
        return None
    path = to_fs_path(uri)
    return str(Path(path).resolve()) if path else None


class Workspace:
    def __init__(self, store: DocumentStore) -> None:
        self.store = store
        self.index: WorkspaceIndex | None = None
        self.selector: Selector | None = None
        self.task: asyncio.Task | None = None
        self.build_s: float | None = None  # how long the first build took (dg/status, bench)
        self._open: OrderedDict[str, str] = OrderedDict()  # path -> uri, most recently used last
        self._dirty: dict[str, float] = {}  # edited open documents -> when they were last changed
        self._paths: dict[str, str | None] = {}  # uri -> path (didChange asks per keystroke; resolve() is a syscall)
        self._wake = asyncio.Event()  # a file was marked or a document edited: the sleeping index task looks again

    def path(self, uri: str) -> str | None:
        if uri not in self._paths:
            if len(self._paths) > 1024:
                self._paths.clear()
            self._paths[uri] = uri_path(uri)
        return self._paths[uri]

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self, roots: list[Path], max_files: int, max_file_bytes: int,
              wait: Callable[[], float]) -> None:
        """Index `roots` (and open documents) in the background; `wait()`: seconds to wait before the next slice
        (0: the server is idle now)."""
        self.stop()
        self.build_s = None  # a new index: its first build runs again
        self.index = WorkspaceIndex(roots, max_files, max_file_bytes, self._read_open)
        self.selector = Selector(self.index)
        for path in self._open:
            self.index.mark(path)
        self.task = asyncio.ensure_future(self._run(wait))

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.task, self.index, self.selector = None, None, None

    async def _run(self, wait: Callable[[], float]) -> None:
        """Index in SLICE_S steps while the server is idle. With nothing to index, sleep until an event marks a
        file or an edited document's quiet time is over: no wake-ups while the user types (each one is loop time
        on the keystroke's path)."""
        t0 = time.perf_counter()
        while self.index is not None:
            index = self.index
            now = time.perf_counter()
            for path in [p for p, t in self._dirty.items() if now - t > CHANGE_QUIET_S]:
                del self._dirty[path]
                index.mark(path)
            if not index.building:
                if self.build_s is None:
                    self.build_s = now - t0
                    log.info("workspace index: %d files in %.1f s", len(index.files), self.build_s)
                self._wake.clear()
                due = min(self._dirty.values(), default=None)
                try:
                    await asyncio.wait_for(self._wake.wait(),
                                           None if due is None else max(0.001, due + CHANGE_QUIET_S - now))
                except TimeoutError:
                    pass
                continue
            await asyncio.sleep(SLICE_S)  # messages first
            delay = wait()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            index.step(time.perf_counter() + SLICE_S, time.perf_counter)

    def _read_open(self, path: str) -> tuple[str, str] | None:
        uri = self._open.get(path)
        doc = self.store.get(uri) if uri is not None else None
        if doc is None:
            return None
        key = grammar_key(doc.language_id) or EXTENSIONS.get(Path(path).suffix)
        return (key, doc.text) if key else None

    def _mark(self, path: str) -> None:
        assert self.index is not None
        self.index.mark(path)
        self._wake.set()

    # -- events ------------------------------------------------------------------------------------------------

    def opened(self, uri: str) -> None:
        path = self.path(uri)
        if path is None:
            return
        self._open[path] = uri
        self._open.move_to_end(path)
        while len(self._open) > RECENT:
            self._open.popitem(last=False)
        if self.index is not None:
            self._mark(path)

    def changed(self, uri: str) -> None:
        """A didChange: reindex from the document's text once it has been quiet CHANGE_QUIET_S (a burst of
        keystrokes costs one reindex, and never competes with the reparse the next keystroke needs)."""
        path = self.path(uri)
        if path is not None:
            self._open[path] = uri
            self._open.move_to_end(path)
            if path not in self._dirty:
                self._wake.set()  # the idle task learns when this one is due (later keystrokes only delay it)
            self._dirty[path] = time.perf_counter()

    def saved(self, uri: str) -> None:
        path = self.path(uri)
        if path is not None and self.index is not None:
            self._mark(path)

    def closed(self, uri: str) -> None:
        """Back to the file on disk (the editor may have dropped unsaved changes)."""
        path = self.path(uri)
        if path is None:
            return
        self._open.pop(path, None)
        self._dirty.pop(path, None)
        if self.index is not None:
            if self.index.under_root(path) and Path(path).exists():
                self._mark(path)
            else:
                self.index.remove(path)

    def files_changed(self, changes: Sequence[tuple[str, int]]) -> None:
        """workspace/didChangeWatchedFiles: (uri, FileChangeType: 1 created, 2 changed, 3 deleted)."""
        for uri, kind in changes:
            path = self.path(uri)
            if path is None or self.index is None:
                continue
            if kind == 3:
                self.index.remove(path)
            elif path not in self._open:  # an open document's text wins over the disk's
                self._mark(path)

    # -- per hole ----------------------------------------------------------------------------------------------

    def related(self, snap: Snapshot, offset: int, encode: Callable[[str], list[int]],
                budget: int) -> tuple[list[Snippet], str]:
        """dg_lsp.fill.pipeline.Related: context for a hole at `offset` of `snap`, and the file's shown path."""
        path = self.path(snap.uri)
        if self.selector is None or path is None:
            return [], ""
        others = []
        for p, uri in reversed(self._open.items()):
            doc = self.store.get(uri)
            if doc is not None and p != path:
                others.append((p, doc.version, doc.text))
        choice = self.selector.select(path, snap.text, offset, budget, encode, others)
        return choice.snippets, self.selector.short(path)

    @property
    def busy(self) -> bool:
        """Work is left: files to index, or edited documents waiting to be reindexed."""
        return self.index is not None and (self.index.building or bool(self._dirty))

    def status(self) -> dict[str, Any]:
        """dg/status `crossFile.index`: "building" while the first build runs; then "ready", with the updates
        (edited, saved or changed files) waiting to be reindexed as `pending`: the index is complete meanwhile,
        those files' entries are as they were."""
        if self.index is None:
            return {"state": "off"}
        return {"state": "building" if self.build_s is None else "ready", "files": len(self.index.files),
                "pending": self.index.pending + len(self._dirty), "skipped": self.index.skipped,
                "buildS": None if self.build_s is None else round(self.build_s, 2)}


def check_summary(root: Path, max_files: int = 5000, max_file_bytes: int = 262144,
                  encode: Callable[[str], list[int]] | None = None, budget: int = 256) -> dict[str, Any]:
    """`dg-lsp --check`: index `root` as the server would (at once), and the context a hole at the end of the first
    indexed file with resolvable imports would get (files, tokens)."""
    t0 = time.perf_counter()
    index = WorkspaceIndex([root], max_files, max_file_bytes)
    index.build()
    out: dict[str, Any] = {"root": str(root.resolve()), "files": len(index.files), "skipped": index.skipped,
                           "definitions": sum(len(e.defs) for e in index.files.values()),
                           "buildS": round(time.perf_counter() - t0, 2)}
    selector, encode = Selector(index), encode or (lambda s: s.split())
    for path in sorted(index.files):
        text = Path(path).read_text("utf-8", "replace")
        choice = selector.select(path, text, len(text), budget, encode)
        if choice.snippets:
            out["sample"] = {"file": selector.relpath(path), "files": sorted({s.path for s in choice.snippets}),
                             "tokens": choice.tokens}
            break
    return out
