"""Open documents: text + an incrementally maintained tree-sitter tree; LSP position-encoding conversion.

Positions: LSP (line, character) where `character` counts code units of the negotiated encoding (UTF-8 bytes,
UTF-16 code units or code points). Everything past this module works with offsets into the Python `str` (code
points); tree-sitter works with UTF-8 byte offsets and (row, byte-column) points. All three meet here.

Lines end as LSP says: at "\\n", "\\r\\n" or a lone "\\r". tree-sitter counts rows at "\\n" only, so its points
(row, byte column) are computed apart from our line index where a document holds a lone "\\r".

Lone surrogates (JSON lets a client send "\\ud800"; no tokenizer or UTF-8 codec takes them) are replaced by U+FFFD when
text comes in: both are one UTF-16 unit, one code point and three UTF-8 bytes (surrogatepass), so every position
the client computes still holds.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
import tree_sitter

from dg_lsp.languages import LangSpec, grammar_key, parse_until, parser, spec

Encoding = Literal["utf-8", "utf-16", "utf-32"]

# Above this many UTF-8 bytes we keep no tree (parsing a 10 MB file per keystroke would stall the loop); the
# hole finder then falls back to line-based holes.
MAX_TREE_BYTES = 2_000_000
_BREAK = re.compile("\r\n|\r|\n")
_LONE_CR = re.compile("\r(?!\n)")
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD (see the module docstring)."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub("\ufffd", text)


def _lone_crs(text: str, lo: int, hi: int) -> int:
    """How many lone "\\r" start in text[lo:hi] (the character after `hi - 1` is looked at too)."""
    if text.find("\r", lo, hi) < 0:
        return 0
    return sum(1 for m in _LONE_CR.finditer(text, lo, min(hi + 1, len(text))) if m.start() < hi)


def _utf8_width(ch: str) -> int:
    o = ord(ch)
    return 1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4


def _units(segment: str, encoding: Encoding) -> int:
    """Length of `segment` in code units of `encoding`."""
    if encoding == "utf-32" or segment.isascii():
        return len(segment)
    if encoding == "utf-8":
        return len(segment.encode("utf-8", "surrogatepass"))
    return len(segment.encode("utf-16-le", "surrogatepass")) // 2


def _chars_for_units(segment: str, units: int, encoding: Encoding) -> int:
    """How many characters of `segment` fit in `units` code units; a unit inside a character rounds down."""
    if units <= 0:
        return 0
    if encoding == "utf-32" or segment.isascii():
        return min(units, len(segment))
    n = 0
    for i, ch in enumerate(segment):
        w = _utf8_width(ch) if encoding == "utf-8" else (2 if ord(ch) > 0xFFFF else 1)
        if n + w > units:
            return i
        n += w
    return len(segment)


def line_starts(text: str) -> np.ndarray:
    """Offsets where each line of `text` starts (the first is 0); "\\n", "\\r\\n" and a lone "\\r" end a line."""
    return np.fromiter((0, *(m.end() for m in _BREAK.finditer(text))), dtype=np.int64)


def _row(starts: np.ndarray, offset: int) -> int:
    """The line holding `offset` (in [0, len(text)]): a binary search in `starts`."""
    return int(starts.searchsorted(offset, side="right")) - 1  # the method: np.searchsorted adds a wrapper


def _end_of_row(text: str, starts: np.ndarray, row: int) -> int:
    """Where line `row` ends: before its line break (both characters of a "\\r\\n")."""
    if row + 1 >= len(starts):
        return len(text)
    nxt = int(starts[row + 1])
    return nxt - 2 if nxt >= 2 and text[nxt - 2] == "\r" and text[nxt - 1] == "\n" else nxt - 1


def offset_at(text: str, line: int, character: int, encoding: Encoding, starts: np.ndarray) -> int:
    """LSP position -> index into `text` (`starts`: its `line_starts`). Clamps (never raises): past a line's end ->
    the line end; past the last line -> len(text); negative values -> 0."""
    return _locate(text, line, character, encoding, starts)[0]


def _locate(text: str, line: int, character: int, encoding: Encoding, starts: np.ndarray) -> tuple[int, int, int]:
    """`offset_at` with line starts: (offset, its line, that line's start)."""
    if line >= len(starts):
        row = len(starts) - 1
        return len(text), row, int(starts[row])
    row = max(line, 0)
    pos = int(starts[row])
    end = _end_of_row(text, starts, row)
    return pos + _chars_for_units(text[pos:end], character, encoding), row, pos


def position_at(text: str, offset: int, encoding: Encoding, starts: np.ndarray) -> tuple[int, int]:
    """Index into `text` (`starts`: its `line_starts`) -> LSP (line, character). The offset is clamped to
    [0, len(text)]."""
    offset = min(max(offset, 0), len(text))
    row = _row(starts, offset)
    start = int(starts[row])
    return row, _units(text[start:offset], encoding)


def _change_parts(change: Any) -> tuple[tuple[int, int, int, int] | None, str]:
    """A change event (dict or lsprotocol object) -> ((l0, c0, l1, c1) or None if full, new text)."""
    if isinstance(change, dict):
        new_text, rng = change["text"], change.get("range")
    else:
        new_text, rng = change.text, getattr(change, "range", None)
    if rng is None:
        return None, new_text
    if isinstance(rng, dict):
        s, e = rng["start"], rng["end"]
        return (s["line"], s["character"], e["line"], e["character"]), new_text
    return (rng.start.line, rng.start.character, rng.end.line, rng.end.character), new_text


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of one document version that a worker thread may read while the loop keeps editing.

    `tree` is a copy owned by this snapshot (None when there is no grammar or the file is too big). When the
    reparse did not finish within the caller's budget, `tree_fresh` is False and `tree` is the last parsed tree
    with every edit since applied (`Tree.edit`): its positions fit `text`, its structure is the last parse's.
    """

    uri: str
    version: int
    text: str
    language: str | None
    tree: tree_sitter.Tree | None
    starts: np.ndarray = field(repr=False, compare=False)  # line_starts(text)
    language_id: str = ""
    tree_fresh: bool = True
    opened: int = 0  # which open of `uri` this is (DocumentStore counts didOpens): a version is unique only within one

    @property
    def identity(self) -> tuple[int, int]:
        """(open, version): what a result from this snapshot belongs to (a reopened document restarts at 1)."""
        return self.opened, self.version

    @cached_property
    def spec(self) -> LangSpec | None:
        return spec(self.language)

    @cached_property
    def is_ascii(self) -> bool:
        return self.text.isascii()

    @cached_property
    def data(self) -> bytes:
        """The UTF-8 bytes the tree was parsed from."""
        return self.text.encode("utf-8", "surrogatepass")

    def char_offset(self, byte: int) -> int:
        """UTF-8 byte offset (from a tree node) -> str offset."""
        if self.is_ascii:
            return byte
        return len(self.data[:byte].decode("utf-8", "ignore"))

    def byte_offset(self, offset: int) -> int:
        if self.is_ascii:
            return offset
        return len(self.text[:offset].encode("utf-8", "surrogatepass"))

    def span(self, node: tree_sitter.Node) -> tuple[int, int]:
        """A node's (start, end) as str offsets."""
        return self.char_offset(node.start_byte), self.char_offset(node.end_byte)

    def line_start(self, offset: int) -> int:
        """Start of the line holding `offset` (a binary search in the line index)."""
        return int(self.starts[_row(self.starts, min(max(offset, 0), len(self.text)))])

    def line_end(self, offset: int) -> int:
        """End of the line holding `offset`, before its line break (an offset inside a "\\r\\n" stays put)."""
        offset = min(max(offset, 0), len(self.text))
        return max(_end_of_row(self.text, self.starts, _row(self.starts, offset)), offset)

    def line_of(self, offset: int) -> int:
        return _row(self.starts, min(max(offset, 0), len(self.text)))

    def offset_at(self, line: int, character: int, encoding: Encoding) -> int:
        return offset_at(self.text, line, character, encoding, self.starts)

    def position_at(self, offset: int, encoding: Encoding) -> tuple[int, int]:
        return position_at(self.text, offset, encoding, self.starts)


class Document:
    """One open document. Mutated only on the event loop; workers read `snapshot()`s.

    A change applies the text and `Tree.edit`s the tree but does not reparse: the reparse happens when a tree
    is needed (`snapshot`, `parse`), so a burst of keystrokes costs one parse. tree-sitter's error recovery can
    make one incremental reparse of a big file take tens of milliseconds (an unclosed quote), so the keystroke
    path asks for a bounded one (`snapshot(budget_s)`) and the server finishes it in slices (`parse(budget_s)`
    resumes a stopped parse) between requests.
    """

    def __init__(self, uri: str, language_id: str, version: int, text: str,
                 parse_budget_s: float | None = None, opened: int = 0) -> None:
        self.uri = uri
        self.opened = opened  # see Snapshot.opened
        self.language_id = language_id
        self.version = version
        self.text = text = clean_text(text)
        self.starts = line_starts(text)
        key = grammar_key(language_id)
        self._parser = parser(key) if key else None
        self.language: str | None = key if self._parser is not None else None
        self._tree: tree_sitter.Tree | None = None
        self._fresh = False  # _tree was parsed from exactly self.text
        self._rev = 0  # counts apply_changes calls
        self._halted_rev: int | None = None  # the rev whose parse stopped at its deadline (resumable)
        self._encoded: tuple[int, bytes] = (-1, b"")  # (rev, UTF-8 text)
        self._lone_crs = _lone_crs(text, 0, len(text))  # lone "\r"s: then tree-sitter's rows differ from ours
        # The first parse; with a budget (the server's didOpen) a big file finishes in the background.
        self.parse(parse_budget_s)

    @property
    def tree_fresh(self) -> bool:
        return self._fresh

    def close(self) -> None:
        """Drop the tree and parser (and a half-done parse) now: a reparse task may hold this a while."""
        self._parser = self._tree = None
        self._fresh, self._halted_rev = True, None

    def _data(self) -> bytes | None:
        """The UTF-8 text to parse (encoded once per revision: a reparse may take many slices), or None."""
        if self._parser is None or len(self.text) > MAX_TREE_BYTES:  # a character is at least one byte
            return None
        if self._encoded[0] != self._rev:
            self._encoded = (self._rev, self.text.encode("utf-8", "surrogatepass"))
        data = self._encoded[1]
        return data if len(data) <= MAX_TREE_BYTES else None

    def parse(self, budget_s: float | None = None) -> bool:
        """Bring the tree up to date; with `budget_s`, stop after that long and return False (the tree stays
        the last parse with the edits applied). A stopped parse resumes where it stopped on the next call if
        the text has not changed since, so a big reparse can be done in slices. True when the tree is fresh."""
        if self._fresh or budget_s == 0:
            return self._fresh
        data = self._data()
        if data is None:
            self._tree, self._fresh = None, True
            return True
        if self._halted_rev is not None and self._halted_rev != self._rev:
            self._parser.reset()  # the halted parse was of an older text
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        tree = parse_until(self._parser, data, self._tree, deadline)
        if tree is None:  # tree-sitter keeps its state for the next call
            self._halted_rev = self._rev
            return False
        self._tree, self._fresh, self._halted_rev = tree, True, None
        return True

    def apply_changes(self, changes: Iterable[Any], version: int, encoding: Encoding = "utf-16") -> None:
        """Apply LSP content changes in order (full or range changes); edit the tree (the reparse comes later)."""
        text, tree, starts, lone = self.text, self._tree, self.starts, self._lone_crs
        self._rev += 1
        for change in changes:
            rng, new = _change_parts(change)
            new = clean_text(new)
            if rng is None:
                text, tree, starts, lone = new, None, line_starts(new), _lone_crs(new, 0, len(new))
                continue
            a = _locate(text, rng[0], rng[1], encoding, starts)
            b = _locate(text, rng[2], rng[3], encoding, starts)
            (start, row0, ls0), (end, row1, ls1) = (a, b) if a[0] <= b[0] else (b, a)
            if tree is not None:
                _edit_tree(tree, text, start, end, new, (row0, ls0), (row1, ls1), lone > 0)
            before = _lone_crs(text, max(start - 1, 0), end + 1)
            starts = _splice_starts(starts, start, end, new, text)
            text = text[:start] + new + text[end:]
            lone += _lone_crs(text, max(start - 1, 0), start + len(new) + 1) - before
        self.text, self.version, self.starts, self._lone_crs = text, version, starts, lone
        self._tree, self._fresh = tree, False

    def snapshot(self, budget_s: float | None = None) -> Snapshot:
        """An immutable view; the tree reparsed first (within `budget_s` when given, see `Snapshot`)."""
        self.parse(budget_s)
        tree = self._tree.copy() if self._tree is not None else None
        return Snapshot(self.uri, self.version, self.text, self.language, tree, self.starts, self.language_id,
                        self._fresh, self.opened)


def _splice_starts(starts: np.ndarray, start: int, end: int, new: str, old: str) -> np.ndarray:
    """Line starts after replacing old[start:end] with `new`. A new array: snapshots keep the old one.

    Starts before `start` stay; starts after `end + 1` shift (their line breaks are wholly in the old tail); those in
    between are found again by scanning the new text around the edit, one character either side: a "\\r" just before
    the edit and a "\\n" it inserts (or one just after it) make one line break, and a break the edit splits becomes
    two."""
    delta = len(new) - (end - start)
    lo = int(starts.searchsorted(start, side="left"))  # starts[:lo] < start
    hi = int(starts.searchsorted(end + 1, side="right"))  # starts[hi:] > end + 1
    if lo == hi and not _BREAK.search(new):  # a keystroke within a line: one copy, one add
        out = starts.copy()
        out[hi:] += delta
        return out
    head = old[max(start - 1, 0):start]
    region = head + new + old[end:end + 2]  # the new text from start - len(head); a "\r\n" after it is one break
    base = start - len(head)
    last = start + len(new) + 1  # rescanned starts are in [start, last]; later ones are old ones shifted
    found = [base + m.end() for m in _BREAK.finditer(region)]
    found = [p for p in found if start <= p <= last and p > 0]
    return np.concatenate((starts[:max(lo, 1)], np.asarray(found, dtype=np.int64), starts[hi:] + delta))


def _ts_point(text: str, offset: int, line: tuple[int, int], lone_crs: bool, ascii_text: bool) -> tuple[int, int]:
    """tree-sitter's point (row, UTF-8 byte column) of `offset`, whose line (our index) is `line` = (row, start).
    tree-sitter counts rows at "\\n" only: where the text holds a lone "\\r", count them from the text."""
    row, line_start = line
    if lone_crs:
        row, line_start = text.count("\n", 0, offset), text.rfind("\n", 0, offset) + 1
    col = offset - line_start if ascii_text else len(text[line_start:offset].encode("utf-8", "surrogatepass"))
    return row, col


def _edit_tree(tree: tree_sitter.Tree, text: str, start: int, end: int, new: str, line0: tuple[int, int],
               line1: tuple[int, int], lone_crs: bool) -> None:
    """`Tree.edit` for replacing text[start:end] with `new` (line0/line1: the lines of start/end, our index)."""
    ascii_text = text.isascii()  # O(1) in CPython: then str offsets are byte offsets
    start_byte = start if ascii_text else len(text[:start].encode("utf-8", "surrogatepass"))
    old_end_byte = start_byte + len(text[start:end].encode("utf-8", "surrogatepass"))
    new_bytes = new.encode("utf-8", "surrogatepass")
    start_point = _ts_point(text, start, line0, lone_crs, ascii_text)
    old_end_point = _ts_point(text, end, line1, lone_crs, ascii_text)
    last_nl = new.rfind("\n")
    if last_nl < 0:
        new_end_point = (start_point[0], start_point[1] + len(new_bytes))
    else:
        tail = new[last_nl + 1:].encode("utf-8", "surrogatepass")
        new_end_point = (start_point[0] + new.count("\n"), len(tail))
    tree.edit(start_byte=start_byte, old_end_byte=old_end_byte, new_end_byte=start_byte + len(new_bytes),
              start_point=start_point, old_end_point=old_end_point, new_end_point=new_end_point)


class DocumentStore:
    """uri -> Document. Unknown uris are ignored (a late didChange after didClose must not raise)."""

    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}
        self._opens = itertools.count(1)  # every didOpen, of any uri, gets the next number

    def open(self, uri: str, language_id: str, version: int, text: str,
             parse_budget_s: float | None = None) -> Document:
        doc = Document(uri, language_id, version, text, parse_budget_s, next(self._opens))
        self._docs[uri] = doc
        return doc

    def change(self, uri: str, version: int, changes: Iterable[Any], encoding: Encoding = "utf-16") -> None:
        doc = self._docs.get(uri)
        if doc is not None:
            doc.apply_changes(changes, version, encoding)

    def close(self, uri: str) -> None:
        if (doc := self._docs.pop(uri, None)) is not None:
            doc.close()

    def get(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def identity(self, uri: str) -> tuple[int, int] | None:
        """The open document's (open, version); None when it is not open."""
        doc = self._docs.get(uri)
        return None if doc is None else (doc.opened, doc.version)

    def snapshot(self, uri: str, budget_s: float | None = None) -> Snapshot | None:
        doc = self._docs.get(uri)
        return doc.snapshot(budget_s) if doc is not None else None

    def __contains__(self, uri: str) -> bool:
        return uri in self._docs

    def __len__(self) -> int:
        return len(self._docs)
