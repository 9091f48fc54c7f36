"""Property suite (issue 21): documents in every grammar the server has, with very long tokens and lines, deep
nesting, unbalanced brackets, mixed line endings and non-ASCII, cursors and selections anywhere, through the whole
fill path that runs native code on user text (tests/reliability/fuzz_fill.py says what runs). One subprocess per
grammar runs hypothesis inside it, so a native crash fails this test (with the example that was running) instead of
killing pytest.

DG_FUZZ_EXAMPLES sets the documents per grammar (default 750: 4-20 CPU-s per grammar; 20000 for a long run),
DG_FUZZ_SEED the seed (default 0: the same examples on every run, whatever the count: the first 750 of a 2,000 run).
750 is where seed 0 reaches the one native crash this suite has found, in every grammar: with the old
`Node.first_child_for_byte` calls patched back into dg_lsp/fill/syntax.py each worker dies, at example 9 (tsx,
java), 96 (javascript), 120 (typescript), 490 (rust) or 717 (python, c, cpp, go); at 400 five of the nine pass.
The issue's 2,000 per grammar (~400 s on one worker in CI) runs with `-m slow`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dg_lsp.languages import SPECS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("DG_FUZZ_EXAMPLES", "750"))
ISSUE_EXAMPLES = 2000
SEED = int(os.environ.get("DG_FUZZ_SEED", "0"))


def run_worker(key: str, examples: int, tmp_path) -> None:
    current = tmp_path / "example.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
               PYTHONFAULTHANDLER="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "tests.reliability.fuzz_fill", key, str(examples), str(SEED),
                           str(current)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    if proc.returncode != 0:
        example = current.read_text() if current.exists() else "(none written)"
        pytest.fail(f"the {key} worker died (exit code {proc.returncode}) on the example\n{example}\n"
                    f"stderr:\n{proc.stderr[-4000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["failure"] is None, report["failure"]
    assert report["examples"] >= examples, report


@pytest.mark.parametrize("key", sorted(SPECS))
def test_the_fill_path_survives_generated_documents(key, tmp_path):
    run_worker(key, EXAMPLES, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(SPECS))
def test_the_fill_path_survives_the_issues_count_of_documents(key, tmp_path):
    run_worker(key, max(EXAMPLES, ISSUE_EXAMPLES), tmp_path)
