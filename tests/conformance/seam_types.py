"""What `make typecheck` (mypy, strict) holds every implementer of the engine seam to: each function below only
type-checks when its argument is an engine.seam.InfillBackend (a member missing, or a signature, property or
result type that differs from the Protocol's, fails the check). Nothing here runs; pytest does not collect it."""

from __future__ import annotations

from dg_lsp.backends.openai import OpenAIBackend
from dg_lsp.backends.service import ServiceBackend
from engine.engine import Engine
from engine.seam import InfillBackend
from tests.seam_fakes import FakeBackend
from tests.service.service_fakes import FakeBackend as ServiceFake


def embedded(backend: Engine) -> InfillBackend:
    return backend


def service(backend: ServiceBackend) -> InfillBackend:
    return backend


def openai(backend: OpenAIBackend) -> InfillBackend:
    return backend


def fake(backend: FakeBackend) -> InfillBackend:
    return backend


def service_fake(backend: ServiceFake) -> InfillBackend:
    return backend
