"""The chat prompt format: a hole shown to an instruction-tuned model as one user turn, its answer mapped to code.

The user turn names the file and language, shows the code with an explicit hole marker, says the hole's kind and
size (and, for a rewrite, the code it replaces and the instruction), and asks for only the code that replaces the
marker. The checkpoint's own chat template renders it (thinking off); the model's turn is left open.

Token budget: `context(prefix_ids, suffix_ids, hole)` takes the server's prefix and suffix ids unchanged and puts
the template's frame around them: [head][prefix][marker][suffix][tail]. The frame is rendered once per hole shape
(file, kind, size, instruction) with sentinels where the code goes, then tokenized and cached, so the server
budgets prefix + suffix tokens exactly as for the FIM format (the frame comes on top, as FIM's special tokens do).
Its size is `frame_tokens(hole)`. The ids are decoded back only when they hold a backtick, to pick a code fence
the code does not contain, and for a server that takes chat messages instead of ids (`conversation`: the messages
read back from the laid-out ids).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

from tokenizers import Tokenizer

from engine.prompts.answer import clean_answer
from engine.prompts.template import ChatTemplate
from engine.seam import HoleInfo

MARKER = "<FILL_HERE>"
# Sentinels the frame is rendered with: private-use characters no template rewrites and no code contains.
_PREFIX, _SUFFIX = "\ue000dg-prefix\ue000", "\ue000dg-suffix\ue000"
KIND_TEXT = {
    "rest_of_line": "the rest of the line",
    "line": "one line",
    "bracket_expr": "the expression inside the brackets",
    "statement": "one statement",
    "block_body": "the body of the block",
    "selection": "the selected code, rewritten",
}
GENERIC_HOLE = HoleInfo(kind="statement", language="text", filename="untitled")
# The hole sizes the server asks for (dg_lsp's canvas targets per hole kind); chat canvases are these plus the
# headroom, so a target plus `canvas_headroom` lands on a length with no more than 7 tokens to spare.
BASE_CANVAS_LENGTHS = (16, 32, 64)
# Fence tags whose token cost sets the headroom (the longest LSP language ids among common ones).
_FENCE_TAGS = ("python", "javascript", "typescript", "typescriptreact", "rust", "go", "cpp", "java", "lua")
_TICKS = re.compile(r"`{3,}")


def fence_for(*texts: str) -> str:
    """A backtick fence longer than any run of three or more backticks in `texts` (markdown's rule)."""
    longest = max((len(m.group()) for t in texts for m in _TICKS.finditer(t)), default=2)
    return "`" * max(3, longest + 1)


def answer_overhead(encode: Callable[[str], list[int]]) -> int:
    """Tokens a chat answer spends beside the code: the widest opening fence of `_FENCE_TAGS`, the closing fence and
    one end-of-turn token. Measured on the checkpoint's tokenizer."""
    opening = max(len(encode(f"```{tag}\n")) for tag in _FENCE_TAGS)
    return opening + len(encode("\n```")) + 1


def user_message(prefix: str, suffix: str, hole: HoleInfo, fence: str, suffix_ends_line: bool = False) -> str:
    """The user turn; `suffix_ends_line`: the suffix ends with a newline (the closing fence then needs none)."""
    lang, name = hole.language or "text", hole.filename or "untitled"
    lines = max(1, hole.lines)
    what = KIND_TEXT.get(hole.kind, hole.kind.replace("_", " "))
    code = f"{prefix}{MARKER}{suffix}" + ("" if suffix_ends_line else "\n")
    parts = []
    if hole.related:  # context from other files of the workspace, before the file (stable: prefix caching)
        parts += ["Related code from other files:", ""]
        for path, related in hole.related:
            f = fence_for(related, "", "")
            parts += [f"`{path}`:", f"{f}{lang}", related, f, ""]
    parts += [f"This is the file `{name}` ({lang}). {MARKER} marks a hole in it: {what}, about {lines} "
             f"line{'s' if lines != 1 else ''}.", "", f"{fence}{lang}\n{code}{fence}", ""]
    if hole.replaced:
        parts += [f"{MARKER} replaces this code:", f"{fence}{lang}", hole.replaced, fence, ""]
    if hole.instruction and hole.instruction.strip():
        parts += [f"Instruction for the new code: {hole.instruction.strip()}", ""]
    parts.append(f"Reply with only the code that replaces {MARKER}: no explanation, no code fences, nothing else "
                 "from the file.")
    return "\n".join(parts)


class ChatFormat:
    """engine.seam.PromptFormat for checkpoints with a chat template."""

    name = "chat"

    def __init__(self, template: ChatTemplate, tokenizer: Tokenizer, *, canvas_length: int, max_positions: int,
                 stops: tuple[str, ...], thinking: tuple[str | None, str | None] = (None, None)) -> None:
        self.template, self._tok = template, tokenizer
        # ids whose text may hold a backtick: only code with one of them is decoded to choose its fence
        self._tick_ids = frozenset(i for t, i in tokenizer.get_vocab().items() if "`" in t or t == "<0x60>")
        self.stops, self.thinking = stops, thinking
        # Tokens an answer spends beside the code: the server adds them to a hole's target before it picks the
        # smallest canvas length that holds it (an attribute beside engine.seam.PromptFormat; FIM's is 0).
        self.canvas_headroom = answer_overhead(self._encode)
        pad = -(-self.canvas_headroom // 8) * 8  # canvases in multiples of 8 tokens
        self._canvas_lengths = tuple(sorted({min(n + pad, canvas_length) for n in BASE_CANVAS_LENGTHS}
                                            | {canvas_length}))
        self._frame = functools.lru_cache(maxsize=64)(self._render_frame)
        self._max_context = max(8, max_positions - max(self._canvas_lengths) - self.frame_tokens(GENERIC_HOLE))

    # -- engine.seam.PromptFormat ---------------------------------------------------------------------------------
    @property
    def canvas_lengths(self) -> tuple[int, ...]:
        return self._canvas_lengths

    @property
    def max_context_tokens(self) -> int | None:
        return self._max_context

    def context_budget(self, requested: int) -> int:
        return min(requested, self._max_context)

    def context(self, prefix_ids: list[int], suffix_ids: list[int], hole: HoleInfo | None = None) -> list[int]:
        hole = hole or GENERIC_HOLE
        fence = "```"
        if not self._tick_ids.isdisjoint(prefix_ids) or not self._tick_ids.isdisjoint(suffix_ids) or hole.replaced:
            fence = fence_for(self._decode(prefix_ids), self._decode(suffix_ids), hole.replaced or "")
        head, marker, tail = self._frame(hole, fence, self._decode(suffix_ids[-2:]).endswith("\n"))
        return [*head, *prefix_ids, *marker, *suffix_ids, *tail]

    def answer(self, text: str, prefix: str = "", suffix: str = "") -> str:
        """The code for the hole: see engine.prompts.answer (prefix/suffix: the code around the hole, for echoes)."""
        return clean_answer(text, stops=self.stops, thinking=self.thinking, marker=MARKER, prefix=prefix,
                            suffix=suffix)

    # -- text level (previews, remote chat backends) -------------------------------------------------------------
    def messages(self, prefix: str, suffix: str, hole: HoleInfo | None = None) -> list[dict[str, str]]:
        """The conversation as chat messages (what an OpenAI-style /v1/chat/completions request would carry)."""
        hole = hole or GENERIC_HOLE
        fence = fence_for(prefix, suffix, hole.replaced or "")
        return [{"role": "user", "content": user_message(prefix, suffix, hole, fence, suffix.endswith("\n"))}]

    def conversation(self, context_ids: Sequence[int]) -> list[dict[str, str]] | None:
        """The chat messages `context_ids` render, read back from the ids themselves: what a server that takes
        messages (an OpenAI-compatible /v1/chat/completions) is sent for ids `context` laid out, so nothing but the
        ids has to travel with a fill. The user turn is their text inside the template's frame around one message
        (`_turn`); the ids decode to the text they were encoded from, piece by piece, as `context` relies on. None
        when the ids are not a rendering of one user turn (ids another layout made)."""
        before, after = self._turn
        text = self._decode(list(context_ids))
        if len(text) < len(before) + len(after) or not text.startswith(before) or not text.endswith(after):
            return None
        return [{"role": "user", "content": text[len(before):len(text) - len(after)]}]

    def render(self, prefix: str, suffix: str, hole: HoleInfo | None = None) -> str:
        """The whole prompt as the template renders it."""
        return self.template.render(self.messages(prefix, suffix, hole))

    def frame_tokens(self, hole: HoleInfo | None = None) -> int:
        """At most this many tokens come around prefix + suffix for this hole (a longer fence aside)."""
        return max(sum(map(len, self._frame(hole or GENERIC_HOLE, "```", ends))) for ends in (False, True))

    # -- internals ------------------------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids if text else []

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False) if ids else ""

    @functools.cached_property
    def _turn(self) -> tuple[str, str]:
        """The template's text before and after one user message (the model's turn opened)."""
        before, after = self.template.render([{"role": "user", "content": _PREFIX}]).split(_PREFIX)
        return before, after

    def _render_frame(self, hole: HoleInfo, fence: str,
                      suffix_ends_line: bool = False) -> tuple[list[int], list[int], list[int]]:
        message = user_message(_PREFIX, _SUFFIX, hole, fence, suffix_ends_line)
        text = self.template.render([{"role": "user", "content": message}])
        if text.count(_PREFIX) != 1 or text.count(_SUFFIX) != 1:
            raise ValueError(f"the chat template in {self.template.source} does not keep the message text as it is")
        head, rest = text.split(_PREFIX)
        marker, tail = rest.split(_SUFFIX)
        return self._encode(head), self._encode(marker), self._encode(tail)
