"""The programs the real-editor tiers need (tmux, inotifywait, Emacs with eglot; Neovim 0.12 and pynvim from the
dev extras), and what a test does without one: under `make test` (DG_REQUIRE_TIERS=1, after
tests/editors/system_packages.sh installed what it could) it fails naming the package to install; run by hand
(plain pytest) it skips with the same line."""

from __future__ import annotations

import os
import shutil

import pytest

# program on PATH -> the Debian package that brings it
PACKAGES = {"tmux": "tmux", "inotifywait": "inotify-tools", "emacs": "emacs-nox"}


def required() -> bool:
    """Whether a missing program fails the test (make test) rather than skipping it."""
    return os.environ.get("DG_REQUIRE_TIERS") == "1"


def missing(why: str, how: str = "`make test` installs it when run as root") -> None:
    """Fail (make test) or skip (plain pytest) with `why`, which names the package to install, and `how`."""
    line = f"{why}; {how}"
    if required():
        pytest.fail(f"this tier must run under make test: {line}", pytrace=False)
    pytest.skip(line)


def need_program(program: str) -> str:
    """The program's path, else fail or skip naming its package."""
    path = shutil.which(program)
    if path is None:
        missing(f"{program} not installed (apt-get install -y {PACKAGES[program]})")
    assert path is not None
    return path
