"""The type check `make typecheck` runs holds an implementer to the seam's signatures: a backend whose `infill`
lacks a parameter, or whose `watch_state` takes the wrong listener, fails it (and the real implementers pass)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]

WRONG = '''
from collections.abc import Callable

from engine.seam import InfillBackend
from tests.seam_fakes import FakeBackend


class WrongListener(FakeBackend):
    def watch_state(self, listener: Callable[[int], None]) -> None:  # type: ignore[override]
        ...


def check(b: WrongListener) -> InfillBackend:
    return b
'''


def _mypy(tmp_path: Path, *files: str) -> tuple[str, int]:
    out, err, code = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                              *files])
    return out + err, code


def test_a_backend_off_the_seams_signature_fails_the_type_check(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    bad = tmp_path / "bad_backend.py"
    bad.write_text(textwrap.dedent(WRONG))
    out, code = _mypy(tmp_path, str(bad))
    assert code == 1, out
    assert 'Incompatible return value type (got "WrongListener", expected "InfillBackend")' in out


def test_a_fake_with_a_missing_infill_parameter_fails_the_type_check(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    fake = (ROOT / "tests" / "seam_fakes.py").read_text()
    assert "init_ids: list[int] | None = None, start_noise: float = 1.0) -> FakeResult:" in fake
    broken = tmp_path / "tests" / "seam_fakes.py"
    broken.parent.mkdir()
    broken.write_text(fake.replace(", start_noise: float = 1.0) -> FakeResult:", ") -> FakeResult:")
                      .replace("(init_ids, start_noise)", "(init_ids, 1.0)"))
    (tmp_path / "engine").symlink_to(ROOT / "engine")
    check = tmp_path / "check_fake.py"
    check.write_text("from engine.seam import InfillBackend\nfrom tests.seam_fakes import FakeBackend\n\n\n"
                     "def fake(b: FakeBackend) -> InfillBackend:\n    return b\n")
    monkeypatch.chdir(tmp_path)  # tests.seam_fakes is the broken copy; engine is the checkout's
    out, code = _mypy(tmp_path, str(check))
    assert code == 1, out
    assert 'Incompatible return value type (got "FakeBackend", expected "InfillBackend")' in out
    assert "start_noise" in out
