"""Fill caches: an LRU keyed on the engine's exact inputs, and typed-ahead reuse of the fill last shown.

Both answer without an engine call. The LRU key is everything that determines the engine's output for a
fixed checkpoint (context ids, canvas length, steps, entropy bound, seed), so a hit is the fill a cold run
would give.
Typed-ahead: when the user types the first characters of the fill shown at a cursor, the rest of that fill is
still the answer; we check that nothing else in the document moved.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from engine.seam import InfillBackend

V = TypeVar("V")


class LRU(Generic[V]):
    """A plain least-recently-used map. Lives on the event loop only (no lock)."""

    def __init__(self, capacity: int = 256) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> V | None:
        value = self._items.get(key)
        if value is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def fill_key(context_ids: list[int], canvas_length: int, steps: int | None, entropy_bound: float | None,
             seed: int, max_canvases: int = 1) -> tuple:
    """The LRU key: every engine input that changes its output (for one loaded checkpoint)."""
    return (tuple(context_ids), canvas_length, max_canvases, steps, entropy_bound, seed)


class MemoEncoder:
    """`encode` with a small memo. Per keystroke the prompt builder tokenizes the same suffix text (and often the
    same prefix text) as for the previous keystroke: its cuts are sticky by design, so most calls repeat.

    With `split_before_newline` (true when the tokenizer allows it exactly, see
    `engine.tokens.splits_before_newline`), a text is tokenized as two parts split at its last newline that
    follows a non-whitespace character: the head (the prefix's lines above the cursor) comes from the memo while
    the user types on one line, and only the tail (the cursor's line) is tokenized: a few dozen characters instead
    of the whole prefix."""

    def __init__(self, encode: Callable[[str], list[int]], capacity: int = 64,
                 split_before_newline: bool = False) -> None:
        self._encode = encode
        self._memo: LRU[list[int]] = LRU(capacity)
        self._split = split_before_newline

    def __call__(self, text: str) -> list[int]:
        return list(self._ids(text, self._split))

    def _ids(self, text: str, split: bool) -> list[int]:
        ids = self._memo.get(text)
        if ids is None:
            cut = _last_split(text) if split else -1
            ids = self._ids(text[:cut], False) + self._encode(text[cut:]) if cut > 0 else self._encode(text)
            self._memo.put(text, ids)
        return ids


def _last_split(text: str) -> int:
    """The offset of the last newline in `text` that follows a non-whitespace character, or -1."""
    i = text.rfind("\n")
    while i > 0 and text[i - 1].isspace():
        i = text.rfind("\n", 0, i)
    return i if i > 0 else -1


@dataclass
class FillCaches:
    """The caches a fill may answer from: `fills` ((engine text, confidence) by engine inputs, for one loaded
    backend) and the tokenizer memo of the backend in use."""

    fills: LRU[tuple[str, float | None]] = field(default_factory=lambda: LRU(256))
    _encoder: tuple[InfillBackend, MemoEncoder] | None = None

    def encoder(self, backend: InfillBackend) -> MemoEncoder:
        """The backend's tokenizer behind a memo, one per backend."""
        if self._encoder is None or self._encoder[0] is not backend:
            self._encoder = (backend, MemoEncoder(backend.encode, split_before_newline=backend.splits_before_newline))
        return self._encoder[1]

    def clear(self) -> None:
        self.fills.clear()
        self._encoder = None


@dataclass(frozen=True)
class Shown:
    """The fill last shown for a document: `fill` was to replace `text[cursor:end]` (end: same line)."""

    text: str
    cursor: int
    fill: str
    end: int


def typed_ahead(shown: Shown, text: str, cursor: int) -> str | None:
    """The part of `shown.fill` still to insert when `text` is `shown.text` with a prefix of the fill typed.

    Returns None when the edit is anything else (the caller then runs the pipeline). An empty string means the
    user typed the whole fill.
    """
    typed_len = cursor - shown.cursor
    if typed_len < 0 or len(text) - len(shown.text) != typed_len:
        return None
    typed = text[shown.cursor:cursor]
    if not shown.fill.startswith(typed):
        return None
    # Same lengths and same surroundings: compare the suffix first (usually the shorter side near the end).
    if text[cursor:] != shown.text[shown.cursor:] or text[:shown.cursor] != shown.text[:shown.cursor]:
        return None
    return shown.fill[typed_len:]
