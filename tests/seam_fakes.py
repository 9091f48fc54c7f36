"""The one test double of engine.seam.InfillBackend: no model, no server, the seam's exact signatures (checked by
`make typecheck`, strict). Tests configure it instead of writing their own: the text it fills, how many steps it
takes (each waits `step_s`, or for `gate` when set), a confidence, or a failure (`error`: the seam's error
result). It checks the cancel flag before every step, as the engine does, and records every call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.seam import CancelFlag, CancelToken, PromptFormat, SettingsInForce, StateListener, StepDraft
from engine.tokens import InfillFormat


@dataclass
class FakeResult:
    """engine.seam.FillResult; `ids` beside it (the engine service reads a result's ids when it has them)."""

    text: str
    steps: int = 0
    cancelled: bool = False
    reused_prefix_tokens: int = 0
    timings: dict[str, float] = field(default_factory=lambda: {"total_ms": 1.0})
    confidence: float | None = None
    error: str | None = None
    ids: list[int] = field(default_factory=list)


@dataclass
class FakeDraft:
    """engine.seam.StepDraft."""

    step: int
    steps: int
    text: str
    canvas: int = 0


class FakeBackend:
    """Fills `text` (or `text_for(context_ids)`) after `steps` steps (the call's `steps` when given), cut to the
    canvases; `error`: every fill fails with it; `confidence`: every fill's."""

    def __init__(self, text: str = "x + 1", steps: int = 3, *, confidence: float | None = None,
                 error: str | None = None, step_s: float = 0.0, name: str = "fake",
                 prompt_format: PromptFormat | None = None) -> None:
        self.text, self.default_steps, self.confidence, self.error = text, steps, confidence, error
        self.step_s, self._name = step_s, name
        self._format: PromptFormat = prompt_format or InfillFormat(canvas_lengths=(16, 32, 64))
        self.gate: threading.Event | None = None  # when set, every step waits for it (a test holds a fill running)
        self.started = threading.Event()  # set when a fill starts
        self.calls: list[list[int]] = []  # each fill's context ids
        self.seeds: list[tuple[list[int] | None, float]] = []  # each fill's (init_ids, start_noise)
        self.threads: list[threading.Thread] = []  # the thread each fill ran on
        self.closed = False

    # -- engine.seam.InfillBackend -----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def prompt_format(self) -> PromptFormat:
        return self._format

    @property
    def splits_before_newline(self) -> bool:
        return False

    def encode(self, text: str) -> list[int]:
        return [6 + b % 200 for b in text.encode()]

    def new_cancel_token(self) -> CancelFlag:
        return CancelToken()

    def infill(self, context_ids: list[int], *, canvas_length: int, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, on_step: Callable[[StepDraft], None] | None = None,
               draft_text: bool = False, init_ids: list[int] | None = None, start_noise: float = 1.0) -> FakeResult:
        self.calls.append(list(context_ids))
        self.seeds.append((init_ids, start_noise))
        self.threads.append(threading.current_thread())
        self.started.set()
        if self.error is not None:
            return FakeResult("", error=self.error)
        n = steps or self.default_steps
        text = self.text_for(context_ids)[: canvas_length * max_canvases]
        for step in range(1, n + 1):
            if self.gate is not None:
                self.gate.wait(10)
            if cancel is not None and cancel.cancelled:
                return FakeResult("", step - 1, cancelled=True)
            if self.step_s:
                time.sleep(self.step_s)
            if on_step is not None:
                on_step(FakeDraft(step, n, text[:step] if draft_text else ""))
        return FakeResult(text, n, confidence=self.confidence, ids=self.encode(text))

    def settings_in_force(self) -> SettingsInForce:
        return {"steps": {"value": self.default_steps, "source": "default"}}

    def watch_state(self, listener: StateListener) -> None:
        """The state never changes."""

    def close(self) -> None:
        self.closed = True

    # -- for subclasses ----------------------------------------------------------------------------------------------
    def text_for(self, context_ids: list[int]) -> str:
        return self.text
