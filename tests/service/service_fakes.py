"""The seam's test double (tests/seam_fakes.py) as the engine service's backend: token ids from characters, a
tiny FIM layout, and a refusal on demand. Fills are "filled:<n>" where n is the context's length, so a test can tell
whose fill it got; `gate` holds a fill mid-way, `calls` records every call."""

from __future__ import annotations

from collections.abc import Callable

from engine.seam import CancelFlag, HoleInfo, StepDraft
from tests.seam_fakes import FakeBackend as SeamFake
from tests.seam_fakes import FakeResult


class FakeFormat:
    """engine.seam.PromptFormat, with the FIM bos id the service reads."""

    name = "fim"
    canvas_headroom = 0
    canvas_lengths = (4, 8)
    max_context_tokens = None
    bos_id = 1

    def context_budget(self, requested: int) -> int:
        return requested

    def context(self, prefix_ids: list[int], suffix_ids: list[int], hole: HoleInfo | None = None) -> list[int]:
        return [1, 9, *suffix_ids, 8, *prefix_ids, 7]

    def answer(self, text: str, prefix: str = "", suffix: str = "") -> str:
        return text


class FakeBackend(SeamFake):
    """`steps`: a fill's steps when the call leaves them unset; `fail_when_first_id`: a context starting with that id
    raises (the engine refusing it)."""

    vocab_size = 128

    def __init__(self, steps: int = 4, fail_when_first_id: int | None = None) -> None:
        super().__init__(steps=steps, prompt_format=FakeFormat())
        self.fail_when_first_id = fail_when_first_id

    @property
    def splits_before_newline(self) -> bool:
        return True

    def encode(self, text: str) -> list[int]:
        return [32 + (ord(c) % 90) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def text_for(self, context_ids: list[int]) -> str:
        return f"filled:{len(context_ids)}"

    def infill(self, context_ids: list[int], *, canvas_length: int, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, on_step: Callable[[StepDraft], None] | None = None,
               draft_text: bool = False, init_ids: list[int] | None = None, start_noise: float = 1.0) -> FakeResult:
        if self.fail_when_first_id is not None and context_ids[:1] == [self.fail_when_first_id]:
            self.calls.append(list(context_ids))
            self.seeds.append((init_ids, start_noise))
            self.started.set()
            raise ValueError("this fake refuses that context")
        return super().infill(context_ids, canvas_length=canvas_length, steps=steps, entropy_bound=entropy_bound,
                              max_canvases=max_canvases, seed=seed, cancel=cancel, on_step=on_step,
                              draft_text=draft_text, init_ids=init_ids, start_noise=start_noise)
