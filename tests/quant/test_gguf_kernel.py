"""The ggml-block MoE kernel (engine.kernels.gguf_moe) against its eager oracle under Triton's interpreter on the
CPU, in a child process (TRITON_INTERPRET=1 must be set before triton is first imported): every type it decodes,
ragged N, an empty expert, a one-expert linear, fp32 and fp16 activations. bf16 is for a GPU run: the interpreter
computes bf16 dots wrongly (moe_quant's int8 kernel too: rel err ~1e8 there, 1.7e-7 in fp32)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = "import json; from engine.kernels.gguf_moe import max_rel_errs; print(json.dumps(max_rel_errs()))"


def test_gguf_kernel_matches_its_eager_oracle_under_the_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    errs = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(errs) == 6 * 2 * 2
    for case, err in errs.items():
        assert err < (1e-5 if case.endswith("float32") else 5e-3), (case, err)
