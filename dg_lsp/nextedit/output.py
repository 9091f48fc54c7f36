"""Pure: a next edit's answer -> the proposed window text -> minimal edits, or the reason there is no proposal.

1. `finish` (dg_lsp.fill.pipeline.Shape.finish, after the format's `answer`, which cleans a chat reply as for a fill):
   control characters and a cursor marker echo dropped, line ends as the document's, the window's trailing line
   break kept as it was, extra lines that repeat the code around the window dropped (`drop_echoes`). Never
   shortened otherwise: a fill's syntax gate cuts a fill back to its longest valid prefix, but
   a prefix of a rewritten window would delete the window's rest.
2. `judge`: the proposal diffed against the window into minimal edits (`minimal_edits`: changed lines, then the
   common characters at either end of each change trimmed); none when
   - "unchanged": the window comes back as it is (trailing whitespace aside);
   - "reverts last edit": the proposal undoes the user's last edit (or an accepted suggestion), as a whole, as
     one of its edits or on the line it changed, or turns a line back into what any recent edit changed it from
     (Zed's reversal ratio counts these);
   - "syntax error": the proposal adds syntax errors to the code around it (the fill's gate, dg_lsp.fill.syntax);
   - "syntax unchecked": the gate cannot judge it (Python's parser cannot read the code around the window, nor the
     file, too long): a fill is shortened by the gate, a proposal replaces the window whole, so none is shown
     unchecked. A language without a grammar has no gate: its proposals are shown.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from dg_lsp.documents import Snapshot
from dg_lsp.fill.holes import Hole
from dg_lsp.fill.syntax import SyntaxCheck, prepare_check
from dg_lsp.nextedit.history import Edit
from dg_lsp.nextedit.prompt import CURSOR

UNCHANGED, REVERSAL, SYNTAX, UNCHECKED = "unchanged", "reverts last edit", "syntax error", "syntax unchecked"
TextEdit = tuple[int, int, str]  # (start, end, new text): document offsets of the text it replaces
_GARBAGE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]")


def finish(snap: Snapshot, hole: Hole, code: str, check: SyntaxCheck | None = None, budget: int = 0) -> str | None:
    """The window's proposed text from the format's answer (see the module docstring); None when empty."""
    text = _GARBAGE.sub("", code.replace("\r\n", "\n").replace(CURSOR, ""))
    if not hole.replaced.endswith("\n"):
        text = text.rstrip("\n")  # the canvas's end; the window ends at its last line's end
    text = drop_echoes(snap, hole, text)
    if not text.strip():
        return None
    return text.replace("\n", "\r\n") if "\r\n" in snap.text else text


def _neighbours(snap: Snapshot, hole: Hole, count: int) -> tuple[list[str], list[str]]:
    """Up to `count` lines just above the window and just below it, stripped (above: nearest last)."""
    text, above, below = snap.text, [], []
    pos = hole.start
    while pos > 0 and len(above) < count:
        start = text.rfind("\n", 0, pos - 1) + 1
        above.insert(0, text[start:pos - 1].strip())
        pos = start
    pos = hole.end
    while pos < len(text) and len(below) < count:
        end = text.find("\n", pos + 1)
        end = len(text) if end < 0 else end
        below.append(text[pos + 1:end].strip())
        pos = end
    return above, below


def drop_echoes(snap: Snapshot, hole: Hole, text: str) -> str:
    """A proposal longer than the window whose extra lines repeat the code just above or below the window (a canvas
    that ran on into its surroundings) loses them: the longest such run at its start, then at its end."""
    lines = text.split("\n")
    extra = len(lines) - len(hole.replaced.split("\n"))
    if extra <= 0:
        return text
    above, below = _neighbours(snap, hole, extra)
    for k in range(min(extra, len(above)), 0, -1):
        if [ln.strip() for ln in lines[:k]] == above[-k:] and any(above[-k:]):
            lines, extra = lines[k:], extra - k
            break
    for k in range(min(extra, len(below)), 0, -1):
        if [ln.strip() for ln in lines[-k:]] == below[:k] and any(below[:k]):
            lines = lines[:-k]
            break
    return "\n".join(lines)


def _same(a: str, b: str) -> bool:
    return [ln.rstrip() for ln in a.splitlines()] == [ln.rstrip() for ln in b.splitlines()]


def minimal_edits(base: int, old: str, new: str) -> list[TextEdit]:
    """The edits (document offsets; `base`: where `old` starts) that turn `old` into `new`: one per changed line
    where a run of lines is replaced by as many, else one per changed run of lines; each trimmed of the characters
    it shares with the old text at either end. Sorted, non-overlapping."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    starts = [0]
    for ln in old_lines:
        starts.append(starts[-1] + len(ln))
    out: list[TextEdit] = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if i2 - i1 == j2 - j1:
            out += [_trimmed(base + starts[i], old_lines[i], new_lines[j])
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True) if old_lines[i] != new_lines[j]]
        else:
            out.append(_trimmed(base + starts[i1], "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])))
    return out


def _trimmed(at: int, o: str, n: str) -> TextEdit:
    """The edit replacing `o` (at offset `at`) with `n`, less their common characters at either end."""
    p = 0
    while p < min(len(o), len(n)) and o[p] == n[p]:
        p += 1
    s = 0
    while s < min(len(o), len(n)) - p and o[len(o) - 1 - s] == n[len(n) - 1 - s]:
        s += 1
    return at + p, at + len(o) - s, n[p:len(n) - s]


def reverts(last: Edit | None, hole: Hole, proposed: str, edits: list[TextEdit]) -> bool:
    """Does the proposal undo `last` (the document's latest edit, whose new text is in the current text): as a
    whole, as one of its edits, or on the line it changed (that line, aligned by a line diff, gets the old text
    back at the edit's place)?"""
    if last is None or last.truncated:
        return False
    s, e = last.start, last.end_after
    if (s, e, last.old) in edits:
        return True
    if not (hole.start <= s and e <= hole.end):
        return False
    region, at = hole.replaced, s - hole.start
    undone = region[:at] + last.old + region[at + len(last.new):]
    if _same(undone, proposed):
        return True
    if "\n" in last.old or "\n" in last.new:
        return False
    line_start = region.rfind("\n", 0, at) + 1
    line_end = region.find("\n", at + len(last.new))
    pre, post = region[line_start:at], region[at + len(last.new):len(region) if line_end < 0 else line_end]
    row, old_rows, new_rows = region.count("\n", 0, at), region.split("\n"), proposed.split("\n")
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_rows, new_rows, autojunk=False).get_opcodes():
        if tag != "equal" and i1 <= row < i2:
            return any(_undoes(line, pre, last.old, last.new, post) for line in new_rows[j1:j2])
    return False


def _undoes(line: str, pre: str, old: str, new: str, post: str) -> bool:
    """Does `line` (what the proposal made of the edited line pre + new + post) hold the old text at the edit?"""
    if not old:  # the user inserted `new`: the line without it
        return bool((pre + post).strip()) and line.rstrip() == (pre + post).rstrip()
    line = line.strip()
    at_head = line.startswith((pre + old).lstrip()) and not line.startswith((pre + new).lstrip())
    at_tail = bool(post.strip()) and line.endswith((old + post).rstrip()) and not line.endswith((new + post).rstrip())
    return at_head or at_tail


def reverts_a_line(history: Sequence[Edit], hole: Hole, proposed: str) -> bool:
    """Does the proposal turn a line back into what one of the recent edits (the user's or an accepted suggestion's;
    any of them, however far back) changed it from: a changed pair of aligned lines (B -> A) where an edit made A
    into B? Offsets of older edits have moved since; their touched lines have not."""
    pairs = {(e.new_lines.strip(), e.old_lines.strip()) for e in history
             if "\n" not in e.old_lines and "\n" not in e.new_lines and e.old_lines.strip() and e.new_lines.strip()}
    if not pairs:
        return False
    old_rows, new_rows = hole.replaced.split("\n"), proposed.split("\n")
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_rows, new_rows, autojunk=False).get_opcodes():
        if tag == "replace" and any((a.strip(), b.strip()) in pairs for a in old_rows[i1:i2] for b in new_rows[j1:j2]):
            return True
    return False


def judge(snap: Snapshot, hole: Hole, proposed: str, history: Sequence[Edit] = ()
          ) -> tuple[list[TextEdit], str | None]:
    """(minimal edits, None) for a proposal to show, else ([], the reason it is not shown). `history`: the
    document's recent edits, oldest first (dg_lsp.nextedit.history)."""
    if _same(proposed, hole.replaced):
        return [], UNCHANGED
    edits = minimal_edits(hole.start, hole.replaced, proposed)
    if not edits:
        return [], UNCHANGED
    last = history[-1] if history and history[-1].after == snap.version else None  # its offsets are current
    if reverts(last, hole, proposed, edits) or reverts_a_line(history, hole, proposed):
        return [], REVERSAL
    check = prepare_check(snap, hole, whole_file=True)
    if check is not None and check.unchecked:
        return [], UNCHECKED
    if check is not None and check.adds_errors(proposed):
        return [], SYNTAX
    return edits, None
