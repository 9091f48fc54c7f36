"""A chat prompt for holes (engine.seam.PromptFormat "chat") with the messages kept, for chat-completion servers.

Stand-in until the engine's own chat format (the published-checkpoint issue) is on main: that format should
offer the same `messages(prefix_ids, suffix_ids, hole)`, and `checkpoint.load_local` should then build it
instead. The OpenAI backend sends `messages` to /v1/chat/completions; `context` is the same conversation rendered
with the checkpoint's template and tokenized (what the server budgets and caches by).
"""

from __future__ import annotations

import re
from typing import Any

from tokenizers import Tokenizer

from engine.seam import HoleInfo
from engine.service.chat import ChatTemplate

MARKER = "<|hole|>"
_FENCE = re.compile(r"^\s*```[\w+.-]*[ \t]*\n(.*?)\n?```\s*$", re.S)


class ChatPrompt:
    name = "chat"

    def __init__(self, template: ChatTemplate, tokenizer: Tokenizer,
                 canvas_lengths: tuple[int, ...] = (32, 64, 128, 256), max_context_tokens: int | None = None,
                 template_kwargs: dict[str, Any] | None = None) -> None:
        self._template, self._tok = template, tokenizer
        self._canvas_lengths, self._max = tuple(canvas_lengths), max_context_tokens
        self.template_kwargs = dict(template_kwargs if template_kwargs is not None else {"enable_thinking": False})

    @property
    def canvas_lengths(self) -> tuple[int, ...]:
        return self._canvas_lengths

    @property
    def max_context_tokens(self) -> int | None:
        return self._max

    def context_budget(self, requested: int) -> int:
        return requested if self._max is None else min(requested, self._max)

    def messages(self, prefix_ids: list[int], suffix_ids: list[int], hole: HoleInfo | None = None) -> list[dict]:
        prefix, suffix = self._tok.decode(prefix_ids), self._tok.decode(suffix_ids)
        lang = hole.language if hole else "code"
        where = f" of {hole.filename}" if hole and hole.filename else ""
        size = f" ({hole.kind}, about {hole.lines} line{'s' if hole.lines != 1 else ''})" if hole else ""
        ask = (f"Fill the hole marked {MARKER} in this {lang} code{where}{size}. Answer with only the code that "
               f"replaces {MARKER}: no explanation, no code fence, nothing before or after it.")
        if hole and hole.instruction:
            ask += f" Instruction: {hole.instruction}"
        return [{"role": "user", "content": f"{ask}\n\n{prefix}{MARKER}{suffix}"}]

    def context(self, prefix_ids: list[int], suffix_ids: list[int], hole: HoleInfo | None = None) -> list[int]:
        text = self._template.render(self.messages(prefix_ids, suffix_ids, hole), self.template_kwargs)
        return self._tok.encode(text, add_special_tokens=False).ids

    def answer(self, text: str) -> str:
        """The code in a chat answer: without a code fence around it or an echoed hole marker."""
        m = _FENCE.match(text)
        if m:
            text = m.group(1)
        return text.replace(MARKER, "")
