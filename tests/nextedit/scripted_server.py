"""A dg-lsp server over stdio whose backend is a script, for tests: a FIM "model" that returns its seed canvas (the
next edit's window) with fixed replacements made, at a fixed confidence. With --from-history it reads the edit
history the prompt carries (the `# -` / `# +` comment lines) and renames what the last edit renamed, so a test can
see whether the history reached the prompt.

    python tests/nextedit/scripted_server.py [--confidence=0.99] [--delay=0] [--from-history] OLD=>NEW ...
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field

from dg_lsp.server import build_server
from engine.seam import CancelToken
from engine.tokens import InfillFormat

OFFSET = 16  # token id = UTF-8 byte + OFFSET (ids below are the format's special tokens)


@dataclass
class Result:
    text: str
    steps: int = 1
    cancelled: bool = False
    reused_prefix_tokens: int = 0
    timings: dict = field(default_factory=lambda: {"total_ms": 1.0})
    error: str | None = None
    confidence: float | None = None


class Scripted:
    model_name = "scripted"
    prompt_format = InfillFormat(canvas_lengths=(16, 32, 64, 128, 256))
    splits_before_newline = False
    drafts = False

    def __init__(self, rules: list[tuple[str, str]], confidence: float, delay: float, from_history: bool) -> None:
        self.rules, self.confidence, self.delay, self.from_history = rules, confidence, delay, from_history

    @property
    def name(self) -> str:
        return self.model_name

    def encode(self, text: str) -> list[int]:
        return [b + OFFSET for b in text.encode()]

    def watch_state(self, listener) -> None:  # engine.seam.InfillBackend: a script's state never changes
        pass

    def close(self) -> None:
        pass

    def new_cancel_token(self) -> CancelToken:
        return CancelToken()

    def settings_in_force(self, **overrides) -> dict:
        return {}

    def infill(self, context_ids, *, canvas_length, steps=None, entropy_bound=None, max_canvases=1, seed=0,
               cancel=None, on_step=None, draft_text=False, init_ids=None, start_noise=1.0) -> Result:
        deadline = time.monotonic() + self.delay
        while time.monotonic() < deadline:  # a slow model: cancellable between its "steps"
            if cancel is not None and cancel.cancelled:
                return Result("", cancelled=True)
            time.sleep(0.01)
        text = bytes(i - OFFSET for i in init_ids or [] if i >= OFFSET).decode(errors="replace")
        rules = list(self.rules)
        if self.from_history:
            rules += renamed(bytes(i - OFFSET for i in context_ids if i >= OFFSET).decode(errors="replace"))
        for old, new in rules:  # whole words where the rule starts / ends with a word character
            head, tail = (r"\b" if re.match(r"\w", old) else ""), (r"\b" if re.search(r"\w$", old) else "")
            text = re.sub(head + re.escape(old) + tail, lambda _, new=new: new, text)
        return Result(text, confidence=self.confidence)


def renamed(context: str) -> list[tuple[str, str]]:
    """The (old, new) identifier the last `# -` / `# +` pair of history comment lines renamed, if any."""
    olds = re.findall(r"^# -(.*)$", context, re.M)
    news = re.findall(r"^# \+(.*)$", context, re.M)
    if not olds or not news:
        return []
    a, b = re.findall(r"\w+", olds[-1]), re.findall(r"\w+", news[-1])
    pairs = [(x, y) for x, y in zip(a, b, strict=False) if x != y]
    return pairs[:1] if len(a) == len(b) else []


def main(argv: list[str]) -> None:
    confidence, delay, rules, from_history = 0.99, 0.0, [], False
    for arg in argv:
        if arg == "--from-history":
            from_history = True
            continue
        if arg.startswith("--confidence="):
            confidence = float(arg.split("=", 1)[1])
        elif arg.startswith("--delay="):
            delay = float(arg.split("=", 1)[1])
        else:
            old, new = arg.split("=>", 1)
            rules.append((old, new))
    backend = Scripted(rules, confidence, delay, from_history)
    build_server(engine_factory=lambda settings: backend, check=None).start_io()


if __name__ == "__main__":
    main(sys.argv[1:])
