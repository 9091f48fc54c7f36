"""A dg-lsp server over stdio whose backend is a script, for tests: a FIM "model" that returns its seed canvas (the
next edit's window) with fixed replacements made, at a fixed confidence.

    python tests/nextedit/scripted_server.py [--confidence=0.99] [--delay=0] OLD=>NEW ...
"""

from __future__ import annotations

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

    def __init__(self, rules: list[tuple[str, str]], confidence: float, delay: float) -> None:
        self.rules, self.confidence, self.delay = rules, confidence, delay

    def encode(self, text: str) -> list[int]:
        return [b + OFFSET for b in text.encode()]

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
        for old, new in self.rules:
            text = text.replace(old, new)
        return Result(text, confidence=self.confidence)


def main(argv: list[str]) -> None:
    confidence, delay, rules = 0.99, 0.0, []
    for arg in argv:
        if arg.startswith("--confidence="):
            confidence = float(arg.split("=", 1)[1])
        elif arg.startswith("--delay="):
            delay = float(arg.split("=", 1)[1])
        else:
            old, new = arg.split("=>", 1)
            rules.append((old, new))
    build_server(engine_factory=lambda settings: Scripted(rules, confidence, delay), check=None).start_io()


if __name__ == "__main__":
    main(sys.argv[1:])
