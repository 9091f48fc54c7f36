"""A GGUF file is user input read by native code (numpy memory maps, gguf-py's reader): byte-mutated copies of a
good file go through the engine's GGUF path in a subprocess, so a native crash fails this test instead of pytest.
Every copy either loads or is refused with a clear error (GGUFError or another ValueError)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gguf_checkpoints import GGUF_SHAPE

from engine.formats import gguf_write as W
from engine.testing.tiny import build_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[2]
MUTATIONS = int(os.environ.get("DG_FUZZ_GGUF", "150"))


def test_mutated_gguf_files_load_or_are_refused_clearly(tmp_path):
    src = build_tiny_checkpoint(tmp_path / "hf", GGUF_SHAPE, canvas_length=16, seed=3)
    good = W.write_gguf(src, tmp_path / "good.gguf", "Q8_0")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
               PYTHONFAULTHANDLER="1")
    proc = subprocess.run([sys.executable, "-m", "tests.quant.gguf_mutate", str(good), str(MUTATIONS), "0",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert proc.returncode == 0, (f"the worker died (exit {proc.returncode}) on mutation "
                                  f"{(tmp_path / 'current.txt').read_text()}: {proc.stderr[-3000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "unclear" not in report, report
    assert sum(report["ends"].values()) == MUTATIONS and report["ends"].get("GGUFError", 0) > 0, report
