"""`make demo` (python -m dg_lsp.devtools.demo), run as a user runs it on a fresh clone, ends with fills on screen:
the gate's decision for each fill, and each withheld fill shown anyway, labelled as the demo model's raw fill."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dg_lsp.devtools.demo import FILLS

ROOT = Path(__file__).resolve().parents[2]
DECISION = re.compile(r"shown|withheld \((\d\.\d\d) < (\d\.\d\d)\)|dropped: .+")


@pytest.fixture(scope="module")
def demo_output() -> str:
    if not (ROOT / "engine/default_model/model.safetensors").is_file():
        pytest.fail("the shipped model is missing: the demo runs on it")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", COLUMNS="120")
    proc = subprocess.run([sys.executable, "-m", "dg_lsp.devtools.demo"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def summary(out: str) -> list[tuple[str, str, str]]:
    """(hole, gate decision, fill) for each row of the demo's closing table, which must be the last thing printed."""
    head = out.rindex("the fills: the gate's decision")
    rows = out[head:].splitlines()[2:]
    parsed = []
    for line in rows:
        m = re.match(r"\s+(.+?)\s{2,}(shown|withheld \(.+?\)|dropped: .+?)\s+(\d+)\s{3}(.*)$", line)
        assert m, f"not a row of the summary: {line!r}"
        parsed.append((m.group(1), m.group(2), m.group(4)))
    return parsed


def test_the_demo_ends_with_every_fill_and_the_gates_decision(demo_output: str):
    rows = summary(demo_output)
    assert [r[0] for r in rows] == [what for what, _, _ in FILLS] + ["the body of describe()"]
    for hole, decision, fill in rows:
        assert DECISION.fullmatch(decision), (hole, decision)
        # every fill is on screen: shown, or withheld and shown anyway, or the raw canvas the checks dropped
        assert fill and fill != "(nothing)", (hole, decision)


def test_a_withheld_fill_shows_its_confidence_and_then_the_raw_fill(demo_output: str):
    withheld = [m for m in re.finditer(r"gate: withheld \(confidence (\d\.\d\d), gate (\d\.\d\d)\)", demo_output)]
    shown = demo_output.count("gate: shown (")
    assert withheld or shown, "no fill went through the gate"
    for m in withheld:
        confidence, gate = float(m.group(1)), float(m.group(2))
        assert confidence < gate
        after = demo_output[m.end():m.end() + 400]
        assert "the demo model's raw fill, without the gate" in after, after
        assert "▌" in after, "the raw fill is shown in the file, its lines marked"


def test_the_demo_says_what_the_model_is(demo_output: str):
    assert "placeholder" in demo_output and "minConfidence" in demo_output
