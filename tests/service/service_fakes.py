"""A fake engine.seam.InfillBackend for scheduler and app tests: deterministic text, a gate to hold a fill mid-way,
and a record of every call. Fills are "filled:<n>" where n is the context's length, so a test can tell whose fill
it got."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from engine.seam import CancelToken


@dataclass
class Result:
    text: str
    ids: list[int]
    steps: int
    cancelled: bool = False
    reused_prefix_tokens: int = 0
    timings: dict = field(default_factory=lambda: {"total_ms": 1.0})
    confidence: float | None = None


@dataclass
class Draft:
    step: int
    steps: int
    text: str
    canvas: int = 0


class FakeFormat:
    name = "fim"
    canvas_lengths = (4, 8)
    max_context_tokens = None
    bos_id = 1

    def context_budget(self, requested: int) -> int:
        return requested

    def context(self, prefix_ids: list[int], suffix_ids: list[int], hole=None) -> list[int]:
        return [1, 9, *suffix_ids, 8, *prefix_ids, 7]

    def answer(self, text: str) -> str:
        return text


class FakeBackend:
    """`gate`: when set, every step waits for `gate` (a threading.Event) so a test can hold a fill running."""

    vocab_size = 128
    model_name = "fake"
    splits_before_newline = True
    drafts = True

    def __init__(self, steps: int = 4, fail_when_first_id: int | None = None) -> None:
        self.prompt_format = FakeFormat()
        self.default_steps = steps
        self.fail_when_first_id = fail_when_first_id
        self.gate: threading.Event | None = None
        self.calls: list[list[int]] = []
        self.seeds: list[tuple[list[int] | None, float]] = []  # (init_ids, start_noise) of each fill
        self.started = threading.Event()
        self.steps_after_cancel: list[int] = []

    def encode(self, text: str) -> list[int]:
        return [32 + (ord(c) % 90) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def new_cancel_token(self) -> CancelToken:
        return CancelToken()

    def settings_in_force(self) -> dict:
        return {"steps": self.default_steps}

    def infill(self, context_ids, *, canvas_length, steps=None, entropy_bound=None, max_canvases=1, seed=0,
               cancel=None, on_step=None, draft_text=False, init_ids=None, start_noise=1.0):
        self.calls.append(list(context_ids))
        self.seeds.append((init_ids, start_noise))
        self.started.set()
        if self.fail_when_first_id is not None and context_ids[0] == self.fail_when_first_id:
            raise ValueError("this fake refuses that context")
        n = steps or self.default_steps
        text = f"filled:{len(context_ids)}"[: canvas_length * max_canvases]
        cancelled_at = None
        for step in range(1, n + 1):
            if self.gate is not None:
                self.gate.wait(10)
            if cancel is not None and cancel.cancelled:
                cancelled_at = step - 1
                break
            if on_step is not None:
                on_step(Draft(step, n, text[:step] if draft_text else ""))
        if cancelled_at is not None:
            return Result("", [], cancelled_at, cancelled=True)
        return Result(text, self.encode(text), n)
