"""The prompt of a next edit: the editable window as the hole, the recent edits beside it, in the budget of a fill.

The window is a "selection" hole (dg_lsp.fill.holes.Hole) whose replaced text is the window's, so the fill pipeline's
prompt budget (dg_lsp.fill.prompt.build_prompt: prefix and suffix around the window, context from other files first)
and canvas choice (the window's tokens x 1.5 plus a margin) apply unchanged. What differs per prompt format:

- FIM checkpoints (the shipped model): the canvas is SEEDED with the window's own tokens at `nextEditNoise`
  (dg_lsp.fill.pipeline.seed_ids; engine.seam.seed_canvases), so the model rewrites the window instead of writing it
  from nothing; the recent edits go at the head of the prefix (after context from other files, before the code)
  as comments in the language's comment syntax, one unified diff per edit, oldest first:

      # -    total = a + b
      # +    total = a + b + c

  Why comments: a FIM checkpoint was trained on source files only; comments are the one place where free text
  (here: diff lines) sits in code it has seen, and they cannot break the syntax the model reads after them. Why
  the `-`/`+` lines of a unified diff without its `@@` header and versions, rather than Sweep's `original:` /
  `updated:` blocks: each line says its side with one character, and the header's line numbers and versions mean
  nothing to such a model while costing 14 of the shipped model's 32 history tokens (its whole prompt is 128); the
  old text is what the user replaced, the new names are there verbatim to copy. The history takes at most a
  quarter of the budget, newest edits first.
- chat checkpoints: the file with the window marked (the format's hole marker), the window's code with the cursor
  marked (CURSOR) shown as the code the hole replaces, and an instruction carrying the history (oldest first) and
  asking for the window rewritten as the user's next edit, or unchanged. The canvas starts from noise (a chat
  answer is wrapped in a reply, so the window's tokens are not the answer's).

Stable parts first (the prefix KV cache keeps hitting while the user types): other files, then the history (its
older entries do not change), then the code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from dg_lsp.context.layout import COMMENT, Snippet, chat_related, fim_ids
from dg_lsp.documents import Snapshot
from dg_lsp.fill.holes import Hole, leading_ws
from dg_lsp.fill.prompt import SELECTION_MARGIN, Prompt, build_prompt, hole_info
from dg_lsp.nextedit.history import Edit, render
from dg_lsp.nextedit.window import Window
from engine.seam import PromptFormat

Encode = Callable[[str], list[int]]
CURSOR = "<|cursor|>"
HISTORY_SHARE = 4  # the history takes at most 1/HISTORY_SHARE of the prompt budget
INSTRUCTION = ("This is a next-edit suggestion: predict the edit the user will make next in the code that "
               "replaces {marker_hint}, given their recent edits. {cursor} marks the cursor. Apply the same change "
               "wherever it is still needed there (the other uses of a renamed name, the call sites of a changed "
               "signature, the next instance of a repeated pattern), change as little as possible, and never undo "
               "the recent edits. If no edit is needed, reply with that code unchanged. Reply with the code only, "
               "without {cursor}.")


def window_hole(snap: Snapshot, win: Window) -> Hole:
    """The window as the hole a next edit replaces (a selection of whole lines)."""
    indent = leading_ws(snap.text[win.start:snap.line_end(win.start)])
    return Hole("selection", win.start, win.end, indent, win.last - win.first + 1, win.text)


def window_budget(fmt: PromptFormat) -> int:
    """Tokens the window may have so that its canvas (the window x 1.5 plus a margin, dg_lsp.fill.prompt.target_tokens,
    plus the format's answer headroom) fits the largest canvas length: room for the proposal to grow by half."""
    room = max(fmt.canvas_lengths) - SELECTION_MARGIN - fmt.canvas_headroom
    return max(1, int(room / 1.5))


def fim_history(snap: Snapshot, history: Sequence[Edit], encode: Encode, budget: int) -> str:
    """The history as comment lines (see the module docstring), at most `budget` tokens; "" when none fits."""
    c = COMMENT.get(snap.spec.key if snap.spec else "", "#")

    def comment(diffs: str) -> str:
        return "".join(f"{c} {ln}".rstrip() + "\n" for ln in diffs.split("\n"))

    diffs = render(history, lambda joined: len(encode(comment(joined))) <= budget, header=False)
    return comment("\n".join(diffs)) if diffs else ""


def chat_history(snap: Snapshot, history: Sequence[Edit], encode: Encode, budget: int) -> str:
    """The history as one fenced diff block (oldest first) for a chat instruction, at most `budget` tokens."""
    diffs = render(history, lambda joined: len(encode(joined)) <= budget)
    if not diffs:
        return "The user has made no recent edits in this file."
    return "The user's recent edits in this file, oldest first:\n```diff\n" + "\n".join(diffs) + "\n```"


def build_next_edit_prompt(snap: Snapshot, hole: Hole, encode: Encode, fmt: PromptFormat, budget: int,
                           related: Sequence[Snippet] = (), current: str = "", *, history: Sequence[Edit] = (),
                           cursor: int | None = None) -> Prompt:
    """dg_lsp.fill.prompt.build_prompt's signature (dg_lsp.fill.pipeline.Shape.build) with the history and the cursor
    bound (functools.partial): the prompt of a next edit, see the module docstring."""
    share = budget // HISTORY_SHARE
    if fmt.name == "fim":
        text = fim_history(snap, history, encode, share)
        hist_ids = encode(text) if text else []
        p = build_prompt(snap, hole, encode, fmt, max(budget - len(hist_ids), budget // 2), related, current)
        key = snap.spec.key if snap.spec else ""
        head = fim_ids(list(related), current or hole_info(snap, hole).filename, key, encode) if related else []
        ctx = fmt.context(head + hist_ids + p.prefix_ids, p.suffix_ids, hole_info(snap, hole))
        return replace(p, context_ids=ctx)
    told = chat_history(snap, history, encode, share)
    p = build_prompt(snap, hole, encode, fmt, max(budget - len(encode(told)), budget // 2), related, current)
    at = hole.start if cursor is None else min(max(cursor, hole.start), hole.end)
    shown = hole.replaced[:at - hole.start] + CURSOR + hole.replaced[at - hole.start:]
    marker = "the hole marker"
    info = replace(hole_info(snap, hole), replaced=shown, related=chat_related(list(related)) if related else (),
                   instruction=told + "\n\n" + INSTRUCTION.format(marker_hint=marker, cursor=CURSOR))
    return replace(p, context_ids=fmt.context(p.prefix_ids, p.suffix_ids, info))
