"""The benchmark tests' runner: a bench module started as a user starts it, in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600  # a quick mode takes seconds of CPU; a loaded CI machine can stretch that several times

BenchRun = Callable[[str, list[str]], dict]


def run_bench(module: str, args: list[str]) -> dict:
    """`python -m bench.<module> <args>` from the checkout's root; its last line, which must be a JSON object."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, "-m", f"bench.{module}", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"bench.{module} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"bench.{module} printed nothing"
    try:
        last = json.loads(lines[-1])
    except json.JSONDecodeError:
        pytest.fail(f"bench.{module}'s last line is not JSON: {lines[-1][:300]!r}")
    assert isinstance(last, dict), f"bench.{module}'s last line is not a JSON object"
    return last


@pytest.fixture(scope="session")
def bench_run() -> BenchRun:
    return run_bench
