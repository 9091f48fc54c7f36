"""Helpers for tests/cli: run `dg-lsp ...` (or `python -m MODULE ...`) as a user would, in a child process bounded by
a timeout, with its own cache and runtime folders; read the one line a mistake is answered with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "engine" / "default_model"
TIMEOUT_S = 120.0  # a mistake is answered in seconds (the torch import is most of it); this only stops a hang


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a command: the checkout first on the path, no GPU, offline, caches under `home`."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
               XDG_CACHE_HOME=str(home / "cache"), XDG_RUNTIME_DIR=str(home / "run"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(extra)
    (home / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
    return env


def run(args: list[str], home: Path, *, module: str = "dg_lsp", stdin: bytes | int | None = None,
        cwd: Path | None = None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS` (`dg-lsp ARGS` by default); stdin is empty unless given (bytes, or a file number)."""
    kwargs: dict = {"input": stdin.decode()} if isinstance(stdin, bytes) else {"stdin": stdin or subprocess.DEVNULL}
    return subprocess.run([sys.executable, "-m", module, *args], env=child_env(home), cwd=cwd or home,
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def one_line(text: str) -> str:
    """The only non-empty line of `text` (a mistake is answered in one line, never a traceback)."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{text}"
    assert "Traceback" not in text
    return lines[0]
