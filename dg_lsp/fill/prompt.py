"""Prompt building, pure: snapshot + hole + tokenizer + budget -> the prompt (kept prefix/suffix, the encoder context
laid out by the checkpoint's prompt format, and the length of the engine canvas the fill is denoised in).

Prompt budget (`budget_tokens` covers prefix + suffix ids; the format's special tokens come on top):
- the suffix gets a quarter of the budget first (at least the rest of the hole's line), then the prefix gets
  what is left, then the suffix may take what the prefix did not use, counted in steps of SPARE_STEP tokens;
- the prefix always keeps the hole's line up to the cursor, then, in priority order: the signatures of the
  enclosing definitions (found through the tree; at most half the budget), the nearest lines back to the start
  of the innermost enclosing definition, the file's imports (at most half of what is left), and finally more
  lines going back from the cursor. The kept pieces are joined in document order, so the model sees the head
  of the file and the nearest scope as one text.
- cuts fall on line boundaries (a single over-long line is cut by characters).
- cuts are sticky while the user types: the prompt is suffix-first, so the engine reuses the KV cache of
  everything before the first changed token. The suffix depends only on text after the hole (and on the prefix's
  size in coarse SPARE_STEP steps), and the start of the nearest-lines span snaps forward to a multiple of
  SNAP_LINES lines, so typing on one line leaves both unchanged for many keystrokes.
- context from other files (dg_lsp.context) comes out of the budget first, rounded up to SPARE_STEP / 2 tokens so
  that small changes in it do not move the cuts; a FIM prompt gets it at the head of the prefix ids
  (dg_lsp.context.layout), a chat prompt as HoleInfo.related.
- prefix and suffix are tokenized separately, as in training. To stay cheap per keystroke, text is chosen by a
  chars-per-token estimate first and only the chosen text is tokenized; when the estimate was off, the
  measured ratio replaces it and the choice is redone (a few rounds at most).
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from dg_lsp.context.layout import Snippet, chat_related, fim_ids
from dg_lsp.documents import Snapshot
from dg_lsp.fill.holes import Hole, ancestors
from engine.seam import HoleInfo, PromptFormat

Encode = Callable[[str], list[int]]

# Code BPEs average ~3-4 chars per token; start a little high so the first pass rarely under-fills.
CHARS_PER_TOKEN = 4.5
# Target canvas tokens per hole kind, before rounding up to a trained canvas length.
KIND_TOKENS = {"rest_of_line": 16, "line": 16, "bracket_expr": 16, "statement": 32, "block_body": 64}
SELECTION_MARGIN = 8
_ROUNDS = 4
SNAP_LINES = 16
SPARE_STEP = 128
IMPORT_SCAN = 256


@dataclass(frozen=True)
class Prompt:
    """What the engine gets for one hole: `context_ids` (the encoder context) and the canvas to denoise
    (`canvas_length` tokens, up to `max_canvases` of them). prefix/suffix are the texts kept after trimming."""

    prefix: str
    suffix: str
    canvas_length: int
    hole: Hole
    context_ids: list[int]
    prefix_ids: list[int]
    suffix_ids: list[int]
    max_canvases: int = 1
    cross_file: tuple[str, ...] = ()  # the files context came from (dg_lsp.context)
    cross_file_tokens: int = 0  # the tokens it took
    cross_file_items: tuple[dict[str, object], ...] = ()  # each excerpt: path, line, name, kind (dg/status)


def target_tokens(hole: Hole, encode: Encode) -> int:
    """How many tokens the fill of this hole should get: by kind; a selection by what it replaces."""
    if hole.kind == "selection":
        return math.ceil(1.5 * len(encode(hole.replaced))) + SELECTION_MARGIN
    if hole.kind == "bracket_expr" and hole.max_lines > 1:
        return KIND_TOKENS["statement"]
    return KIND_TOKENS.get(hole.kind, KIND_TOKENS["statement"])


def canvas_length_for(hole: Hole, encode: Encode, canvas_lengths: tuple[int, ...], headroom: int = 0) -> int:
    """The smallest trained canvas length >= the hole's target plus `headroom` (the tokens an answer spends beside
    the code: a chat answer's fences; engine.seam.PromptFormat), the largest one if none is big enough."""
    want = target_tokens(hole, encode) + headroom
    lengths = sorted(canvas_lengths)
    return next((n for n in lengths if n >= want), lengths[-1])


def canvases_for(hole: Hole, encode: Encode, canvas_length: int) -> int:
    """Canvases needed when one is not enough (long selections); the engine chains them."""
    return max(1, math.ceil(target_tokens(hole, encode) / canvas_length))


# ---- suffix ----


def _cut_suffix(text: str, start: int, chars: int) -> str:
    """text[start:] cut to about `chars`, at the end of a line, keeping at least the first line."""
    end = start + max(chars, 0)
    if end >= len(text):
        return text[start:]
    nl = text.rfind("\n", start, end)
    if nl < 0:  # the first line alone is longer than the budget: cut inside it
        return text[start:end]
    return text[start : nl + 1]


def _fit_suffix(text: str, start: int, budget: int, encode: Encode) -> tuple[str, list[int]]:
    if budget <= 0 or start >= len(text):
        return "", []
    cpt = CHARS_PER_TOKEN
    for _ in range(_ROUNDS):
        seg = _cut_suffix(text, start, int(budget * cpt))
        ids = encode(seg)
        if len(ids) <= budget:
            return seg, ids
        cpt = min(cpt, len(seg) / len(ids)) * 0.97
    while len(ids) > budget:  # the estimate kept failing: shrink by characters until it fits
        seg = seg[: int(len(seg) * budget / len(ids) * 0.9)]
        ids = encode(seg)
    return seg, ids


# ---- prefix ----


def _enclosing(snap: Snapshot, offset: int) -> list[tuple[int, int]]:
    """(first line offset, header end offset) of each definition enclosing `offset`, innermost first."""
    if snap.tree is None or snap.spec is None:
        return []
    text, out = snap.text, []
    b = snap.byte_offset(offset)
    root = snap.tree.root_node
    for node in ancestors(root, root.descendant_for_byte_range(max(b - 1, 0), b)):
        if node.type in snap.spec.scopes and node.start_byte < b:
            start = snap.line_start(snap.char_offset(node.start_byte))
            body = node.child_by_field_name("body")
            head_end = snap.char_offset(body.start_byte) if body is not None else snap.char_offset(node.end_byte)
            # Python's block starts at its first statement: end the header at the line of the last code
            # before the body (the `:` or the `{` line).
            head_end = min(head_end, offset)
            while body is not None and head_end > start and text[head_end - 1].isspace():
                head_end -= 1
            nl = text.find("\n", head_end)
            header_end = len(text) if nl < 0 else nl + 1
            out.append((start, min(header_end, offset)))
    return out


def _imports(snap: Snapshot, before: int) -> list[tuple[int, int]]:
    """Whole-line spans of top-level import nodes that end before `before`, among the first IMPORT_SCAN top-level
    nodes (imports sit at the head of a file; a file of 100,000 statements must not cost a walk over all)."""
    if snap.tree is None or snap.spec is None:
        return []
    text, out, kinds = snap.text, [], snap.spec.imports
    limit = snap.byte_offset(before)
    cursor = snap.tree.root_node.walk()  # sibling steps: Node.child(i) walks from the first child every time
    more = cursor.goto_first_child()
    for _ in range(IMPORT_SCAN):
        if not more:
            break
        node = cursor.node
        if node.start_byte >= limit:
            break
        if node.type in kinds and node.end_byte <= limit:
            s, e = snap.span(node)
            nl = text.find("\n", e)
            out.append((snap.line_start(s), min(before, len(text) if nl < 0 else nl + 1)))
        more = cursor.goto_next_sibling()
    return out


def _back_one_line(text: str, line_start: int, floor: int) -> int:
    return max(text.rfind("\n", 0, line_start - 1) + 1, floor)


def _choose_prefix(snap: Snapshot, start: int, chars: int) -> str:
    """Pick line-aligned spans of text[:start] worth about `chars` characters and join them in order."""
    text = snap.text
    line_start = snap.line_start(start)
    if start - line_start >= chars:
        return text[start - max(chars, 0) : start]
    left = chars - (start - line_start)
    scopes = _enclosing(snap, start)
    scope_start = scopes[0][0] if scopes else 0

    # 1. signatures of enclosing definitions, innermost first (small and what the body is about)
    extra: list[tuple[int, int]] = []
    for s, e in scopes:
        if e <= line_start and e - s <= left // 2:
            extra.append((s, e))
            left -= e - s
    # 2. nearest lines, back to the innermost definition's first line
    near = line_start
    while near > scope_start and near - _back_one_line(text, near, 0) <= left:
        prev = _back_one_line(text, near, 0)
        left -= near - prev
        near = prev
    # 3. imports (at most half of what is left)
    head_left = left // 2
    for s, e in _imports(snap, near):
        if e - s > head_left:
            break
        if not any(a <= s < b for a, b in extra):
            extra.append((s, e))
            head_left -= e - s
            left -= e - s
    # 4. more nearest lines with the rest, down to where the last kept piece ends
    floor = max((e for _, e in extra if e <= near), default=0)
    while near > floor and near - _back_one_line(text, near, floor) <= left:
        prev = _back_one_line(text, near, floor)
        left -= near - prev
        near = prev
    # 5. stickiness: unless the span reaches the floor, start it at the next line whose number is a multiple
    # of SNAP_LINES, so a growing cursor line does not move the start (and the KV cache stays valid)
    if near > floor:
        line_no = snap.line_of(near)
        skip = (-line_no) % SNAP_LINES
        snapped = near
        while skip and snapped < line_start:
            nl = text.find("\n", snapped, line_start)
            if nl < 0:
                break
            snapped, skip = nl + 1, skip - 1
        near = snapped
    merged: list[tuple[int, int]] = []
    for s, e in sorted(extra + [(near, start)]):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return "".join(text[s:e] for s, e in merged)


def _fit_prefix(snap: Snapshot, start: int, budget: int, encode: Encode) -> tuple[str, list[int]]:
    if budget <= 0 or start <= 0:
        return "", []
    cpt, grown = CHARS_PER_TOKEN, False
    for _ in range(_ROUNDS):
        seg = _choose_prefix(snap, start, int(budget * cpt))
        ids = encode(seg)
        measured = len(seg) / max(len(ids), 1)
        if len(ids) > budget:
            cpt = min(cpt, measured) * 0.97
            continue
        # Under-filled while text was left out: the estimate was low; retry once with the measured ratio.
        if not grown and len(seg) < start and len(ids) < 0.85 * budget and measured > cpt:
            grown, cpt = True, measured * 0.97
            continue
        return seg, ids
    while len(ids) > budget:  # the estimate kept failing: shrink by characters until it fits
        seg = seg[len(seg) - int(len(seg) * budget / len(ids) * 0.9) :]
        ids = encode(seg)
    return seg, ids


def hole_info(snap: Snapshot, hole: Hole) -> HoleInfo:
    """What a prompt format may use besides the code around the hole (engine.seam.HoleInfo)."""
    name = posixpath.basename(snap.uri.split("?", 1)[0].split("#", 1)[0])
    return HoleInfo(kind=hole.kind, language=snap.language_id, filename=name, lines=hole.max_lines,
                    replaced=hole.replaced if hole.kind == "selection" else None, instruction=hole.instruction)


def build_prompt(snap: Snapshot, hole: Hole, encode: Encode, fmt: PromptFormat, budget_tokens: int,
                 related: Sequence[Snippet] = (), current: str = "") -> Prompt:
    """Cut prefix text[:hole.start] and suffix text[hole.end:] to the budget; see the module docstring. `related`:
    context from other files (already fitted to its own budget), `current`: the file's path as it shows there."""
    text = snap.text
    info = hole_info(snap, hole)
    head: list[int] = []
    if related and fmt.name == "chat":
        info = replace(info, related=chat_related(list(related)))
        spent = sum(len(encode(f"`{p}`:\n{code}\n")) for p, code in info.related)
    elif related:
        head = fim_ids(list(related), current or info.filename, snap.spec.key if snap.spec else "", encode)
        spent = len(head)
    if related:
        step = SPARE_STEP // 2
        budget_tokens = max(budget_tokens - -(-spent // step) * step, budget_tokens // 2)
    suffix, suffix_ids = _fit_suffix(text, hole.end, budget_tokens // 4, encode)
    prefix, prefix_ids = _fit_prefix(snap, hole.start, budget_tokens - len(suffix_ids), encode)
    # the prefix's size counted in coarse steps, so the suffix cut does not move with every keystroke
    used = -(-len(prefix_ids) // SPARE_STEP) * SPARE_STEP
    spare = budget_tokens - used - len(suffix_ids)
    if spare > 0 and len(suffix) < len(text) - hole.end:
        suffix, suffix_ids = _fit_suffix(text, hole.end, budget_tokens - used, encode)
    canvas_length = canvas_length_for(hole, encode, fmt.canvas_lengths, fmt.canvas_headroom)
    return Prompt(
        prefix=prefix,
        suffix=suffix,
        canvas_length=canvas_length,
        hole=hole,
        context_ids=fmt.context(head + prefix_ids, suffix_ids, info),
        prefix_ids=prefix_ids,
        suffix_ids=suffix_ids,
        max_canvases=canvases_for(hole, encode, canvas_length),
        cross_file=tuple(dict.fromkeys(s.path for s in related)),
        cross_file_tokens=spent if related else 0,
        cross_file_items=tuple(s.item() for s in related),
    )
