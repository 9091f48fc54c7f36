"""The backends the conformance table runs through, each behind the same `Subject`: the embedded engine (the shipped
model), the `service` backend and the `openai` backend against an engine service on that same engine (in this
process, so a test can hold its engine at a step), and the `openai` backend against the vLLM-shaped stand-in
(tests/service/fake_vllm.py). What differs between them is data on the Subject, not a probe of the backend."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from dg_lsp.backends.factory import build_backend
from dg_lsp.config import Settings
from engine.engine import Engine, default_model_path
from engine.seam import CancelFlag, InfillBackend, StepDraft
from tests.service.fake_vllm import FakeVLLM
from tests.service.service_harness import InProcessService, wait_until

BACKENDS = ["embedded", "service", "openai-service", "openai-vllm"]


class HeldEngine(Engine):
    """The shipped engine, which a test can hold at the first step of its next fill (`hold`): `reached` is set
    there, and the step waits for `release`."""

    holding = False
    reached = threading.Event()
    release = threading.Event()

    def infill(self, context_ids: list[int], *, on_step: Callable[[StepDraft], None] | None = None,
               **kw: Any) -> Any:
        def step(draft: StepDraft) -> None:
            if self.holding and draft.step == 1:
                self.holding = False
                self.reached.set()
                self.release.wait(30)
            if on_step is not None:
                on_step(draft)

        return super().infill(context_ids, on_step=step, **kw)


@dataclass
class Subject:
    """A backend as the table sees it. `steps_streamed`: `on_step` runs after every step; `confidence_known`: a
    fill carries its confidence (else None: unknown); `same_fill`: a fill equals the embedded engine's for the same
    arguments (all of them reach the engine); `hold`: a context in which the next fill is held running until the
    context ends (yields a probe: has the fill reached the engine?); `failing`: a context in which the server fails
    every fill (None: a backend without a server)."""

    name: str
    backend: InfillBackend
    steps_streamed: bool
    confidence_known: bool
    same_fill: bool
    hold: Callable[[], contextlib.AbstractContextManager[Callable[[], bool]]]
    failing: Callable[[], contextlib.AbstractContextManager[None]] | None


@pytest.fixture(scope="session")
def engine() -> HeldEngine:
    eng = HeldEngine.from_pretrained(default_model_path(), device="cpu", dtype="float32")
    assert isinstance(eng, HeldEngine)
    return eng


@contextlib.contextmanager
def held(engine: HeldEngine) -> Iterator[Callable[[], bool]]:
    engine.reached.clear()
    engine.release.clear()
    engine.holding = True
    try:
        yield engine.reached.is_set
    finally:
        engine.holding = False
        engine.release.set()


@pytest.fixture(scope="session")
def service(engine: HeldEngine) -> Iterator[InProcessService]:
    with InProcessService(engine, default_model_path()) as svc:
        yield svc


@pytest.fixture(scope="session")
def vllm() -> Iterator[FakeVLLM]:
    with FakeVLLM() as fake:
        yield fake


@contextlib.contextmanager
def refusing(svc: InProcessService) -> Iterator[None]:
    """The engine service refuses every prompt (HTTP 413: longer than its limit)."""
    limits = svc.state.limits
    svc.state.limits = replace(limits, max_prompt_tokens=1)
    try:
        yield
    finally:
        svc.state.limits = limits


@contextlib.contextmanager
def vllm_mode(vllm: FakeVLLM, mode: str, probe: Callable[[], bool] = lambda: True) -> Iterator[Any]:
    before = len(vllm.requests)
    vllm.mode = mode
    try:
        yield lambda: len(vllm.requests) > before and probe()
    finally:
        vllm.mode = "ok"


@pytest.fixture(scope="session")
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The service backend caches the service's tokenizer files: here, not in the user's cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("run")))
        yield


@pytest.fixture(scope="session", params=BACKENDS)
def subject(request: pytest.FixtureRequest, engine: HeldEngine, private_cache: None) -> Iterator[Subject]:
    name = request.param
    if name == "embedded":
        yield Subject(name, engine, True, True, True, lambda: held(engine), None)
        return
    if name == "openai-vllm":
        fake = request.getfixturevalue("vllm")
        b = build_backend(Settings(backend="openai", endpoint=fake.url))
        yield Subject(name, b, False, False, False, lambda: vllm_mode(fake, "hang"),
                      lambda: vllm_mode(fake, "500"))
        b.close()
        return
    svc: InProcessService = request.getfixturevalue("service")
    kind = "service" if name == "service" else "openai"
    b = build_backend(Settings(backend=kind, endpoint=svc.url, auto_start=False))
    # the engine service's OpenAI routes get no steps, seed nor entropy bound (a plain OpenAI request)
    yield Subject(name, b, kind == "service", kind == "service", kind == "service", lambda: held(engine),
                  lambda: refusing(svc))
    b.close()


def run_in_thread(fill: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.setdefault("res", fill()), daemon=True)
    t.start()
    return t, out


def cancel_when(probe: Callable[[], bool], token: CancelFlag) -> None:
    wait_until(probe, 60, "the fill to reach the engine")
    token.cancel()
