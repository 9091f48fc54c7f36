"""Per-document edit history, from didChange: the recent edits as (offset, old text, new text) with versions, adjacent
keystrokes merged into one edit, rendered as unified diffs for next-edit prompts.

Bounds: at most MAX_EDITS edits per document, none older than MAX_AGE_S, each side of an edit kept up to
MAX_EDIT_CHARS characters (a larger paste is kept as "truncated" and never merged); a document's history goes when
it closes or reopens. Memory is O(open documents x MAX_EDITS x MAX_EDIT_CHARS) whatever the user types.

Merging: a change that touches (overlaps or abuts) the text the previous edit wrote, within MERGE_GAP_S of it, is
composed with it into one edit (typing `foo` is one edit, not three; a backspace trims it). Edits that cancel out
(typing then deleting the same text) leave nothing. An edit marked accepted (a next-edit proposal the user took,
`mark_accepted`) is never merged into, so a later proposal sees it whole and is not allowed to undo it.
"""

from __future__ import annotations

import difflib
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dg_lsp.documents import Encoding, offset_at

MAX_EDITS = 8
MAX_AGE_S = 300.0
MAX_EDIT_CHARS = 2_000
MERGE_GAP_S = 2.0
LINE_CAP = 500  # an edit's lines are kept up to this many characters either side of it
CONTEXT_LINES = 0  # unified diffs show the changed lines only: the prompt budget is small
Clock = Callable[[], float]


@dataclass(frozen=True)
class Edit:
    """One edit: text[start:start + len(old)] of version `before` became `new` in version `after`.

    `old_lines` / `new_lines`: the whole lines the edit touched, before and after (what a diff shows); `line`: the
    first one's number (0-based). `at`: when the edit last grew (monotonic seconds)."""

    start: int
    old: str
    new: str
    before: int
    after: int
    line: int
    old_lines: str
    new_lines: str
    at: float
    accepted: bool = False
    truncated: bool = False

    @property
    def end_after(self) -> int:
        """Where the edit's new text ends in the text after it."""
        return self.start + len(self.new)

    def diff(self, header: bool = True) -> str:
        """The edit as a unified diff hunk of the touched lines, its versions after the `@@` header (`header`
        False: the `-`/`+` lines alone)."""
        old, new = self.old_lines.splitlines(), self.new_lines.splitlines()
        hunk = list(difflib.unified_diff(old, new, n=CONTEXT_LINES, lineterm=""))[2:]
        if not hunk or not header:
            return "\n".join(hunk[1:])
        # difflib numbers from 1 within the excerpt: the file's lines; the versions where git puts a section name
        tag = ", an accepted suggestion" if self.accepted else ""
        hunk[0] = f"{_renumber(hunk[0], self.line)} version {self.before} -> {self.after}{tag}"
        return "\n".join(hunk)


def _renumber(header: str, line: int) -> str:
    """`@@ -1,2 +1,3 @@` (excerpt lines) -> the same with the file's line numbers (1-based)."""
    parts = header.split(" ")
    for i in (1, 2):
        sign, rest = parts[i][0], parts[i][1:]
        first, _, count = rest.partition(",")
        parts[i] = f"{sign}{int(first) + line}" + (f",{count}" if count else "")
    return " ".join(parts)


def _lines_around(text: str, start: int, end: int) -> tuple[int, int]:
    """The whole lines holding text[start:end] (without the last line's break), at most LINE_CAP characters either
    side of it (a one-line 5 MB file is not kept whole, nor scanned)."""
    i = text.rfind("\n", max(0, start - LINE_CAP), start)
    j = text.find("\n", end, end + LINE_CAP)
    return i + 1 if i >= 0 else max(0, start - LINE_CAP), j if j >= 0 else min(len(text), end + LINE_CAP)


def changed_span(before: str, after: str, hint: int = 0) -> tuple[int, int, int]:
    """(start, end in `before`, end in `after`) of the one span where two texts differ; `hint`: an offset up to
    which they are known to agree. Binary searches compare slices (C speed), O(n log n) for a rare full change."""
    lo, hi = min(hint, len(before), len(after)), min(len(before), len(after))
    while lo < hi:  # the longest common prefix
        mid = (lo + hi + 1) // 2
        if before[lo:mid] == after[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    s_lo, s_hi = 0, min(len(before), len(after)) - lo
    while s_lo < s_hi:  # the longest common suffix that does not overlap the prefix
        mid = (s_lo + s_hi + 1) // 2
        if before[len(before) - mid:len(before) - s_lo] == after[len(after) - mid:len(after) - s_lo]:
            s_lo = mid
        else:
            s_hi = mid - 1
    return lo, len(before) - s_lo, len(after) - s_lo


def _compose(a: Edit, b_start: int, b_old: str, b_new: str, text_between: str) -> tuple[int, str, str] | None:
    """Edit `a` then edit b (text_between[b_start:][:len(b_old)] became `b_new`; it touches what `a` wrote) as one
    edit on the text before `a`: (start, old, new); None when b does not touch `a`'s new text. `text_between`: the
    text after `a`, before b."""
    a_end, b_end = a.start + len(a.new), b_start + len(b_old)
    if b_start > a_end or b_end < a.start:
        return None
    s, e = min(a.start, b_start), max(a_end, b_end)
    region = text_between[s:e]  # a's new text and b's old text, both inside it
    old = region[:a.start - s] + a.old + region[a_end - s:]
    new = region[:b_start - s] + b_new + region[b_end - s:]
    return s, old, new


class EditHistory:
    """uri -> its recent edits (oldest first). Runs on the event loop (didChange, requests)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._docs: dict[str, deque[Edit]] = {}
        self._clock = clock

    def changed(self, uri: str, before_version: int, after_version: int, before: str, after: str,
                span: tuple[int, int, int] | None = None, starts: Any = None) -> None:
        """Record the change from `before` to `after`. `span`: (start, end in before, end in after) of the change
        when the caller knows it (one ranged change), else it is found by comparing the texts; `starts`: the line
        starts of `after` (dg_lsp.documents.line_starts), else lines are counted."""
        start, old_end, new_end = span if span is not None else changed_span(before, after)
        old, new = before[start:old_end], after[start:new_end]
        if old == new:
            return
        now = self._clock()
        edits = self._docs.setdefault(uri, deque(maxlen=MAX_EDITS))
        self._expire(edits, now)
        truncated = len(old) > MAX_EDIT_CHARS or len(new) > MAX_EDIT_CHARS
        if truncated:
            old, new = old[:MAX_EDIT_CHARS], new[:MAX_EDIT_CHARS]
        line_of = (lambda o: int(starts.searchsorted(o, "right")) - 1) if starts is not None else \
            (lambda o: after.count("\n", 0, o))
        last = edits[-1] if edits else None
        if (last is not None and not truncated and not last.truncated and not last.accepted
                and last.after == before_version and now - last.at <= MERGE_GAP_S):
            merged = _compose(last, start, old, new, before)
            if merged is not None:
                edits.pop()
                s, o, n = merged
                if o != n:
                    edits.append(_edit(s, o, n, last.before, after_version, None, after, now, False, line_of))
                return
        edits.append(_edit(start, old, new, before_version, after_version, before, after, now, truncated, line_of))

    def recent(self, uri: str) -> list[Edit]:
        """The document's edits, oldest first, without expired ones."""
        edits = self._docs.get(uri)
        if not edits:
            return []
        self._expire(edits, self._clock())
        return list(edits)

    def mark_accepted(self, uri: str, version: int) -> int:
        """Mark the edits made from `version` on (a proposal for `version`, applied) as accepted; how many."""
        edits = self._docs.get(uri)
        if not edits:
            return 0
        hits = [i for i, e in enumerate(edits) if e.before >= version]
        for i in hits:
            edits[i] = replace(edits[i], accepted=True)
        return len(hits)

    def forget(self, uri: str) -> None:
        """The document closed or reopened: its history goes with it."""
        self._docs.pop(uri, None)

    def __len__(self) -> int:
        return len(self._docs)

    @staticmethod
    def _expire(edits: deque[Edit], now: float) -> None:
        while edits and now - edits[0].at > MAX_AGE_S:
            edits.popleft()


def _edit(start: int, old: str, new: str, before_v: int, after_v: int, before: str | None, after: str,
          now: float, truncated: bool, line_of: Callable[[int], int]) -> Edit:
    """An Edit with its touched lines; `before` None: rebuilt from `after` (a merged edit)."""
    lo, hi = _lines_around(after, start, start + len(new))
    new_lines = after[lo:hi]
    head, tail = after[lo:start], after[start + len(new):hi]
    old_lines = head + old + tail if before is None or truncated else before[slice(*_lines_around(
        before, start, start + len(old)))]
    line = line_of(lo)
    return Edit(start, old, new, before_v, after_v, line, old_lines, new_lines, now, truncated=truncated)


def render(edits: Iterable[Edit], fits: Callable[[str], bool], header: bool = True) -> list[str]:
    """Diffs of the newest edits that fit together (`fits(joined text)`), oldest first (`header`: see Edit.diff)."""
    chosen: list[str] = []
    for e in reversed(list(edits)):
        d = e.diff(header)
        if not d:
            continue
        if not fits("\n".join([d, *chosen])):
            break
        chosen.insert(0, d)
    return chosen



def change_span(changes: Sequence[Any], before: str, after: str, starts: Any,
                encoding: Encoding) -> tuple[int, int, int] | None:
    """(start, end in before, end in after) of a didChange that is one ranged change (a keystroke), from its
    range; None for anything else (several changes, a whole-text change: `changed_span` compares the texts)."""
    if len(changes) != 1:
        return None
    change = changes[0]
    rng = change.get("range") if isinstance(change, dict) else getattr(change, "range", None)
    if rng is None:
        return None
    a, b = [(p["line"], p["character"]) if isinstance(p, dict) else (p.line, p.character)
            for p in ((rng["start"], rng["end"]) if isinstance(rng, dict) else (rng.start, rng.end))]
    start = offset_at(before, *a, encoding, starts)
    end = start if b == a else offset_at(before, *b, encoding, starts)  # a keystroke's range is empty
    start, old_end = min(start, end), max(start, end)
    return start, old_end, old_end + len(after) - len(before)
