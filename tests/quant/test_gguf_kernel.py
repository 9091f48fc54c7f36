"""The ggml-block MoE kernel (engine.kernels.gguf_moe) against its eager oracle under Triton's interpreter on the
CPU, in a child process (TRITON_INTERPRET=1 must be set before triton is first imported): every type it decodes,
ragged N, an empty expert, a one-expert linear, fp32 activations (fp16 on four types: FP16_QTYPES). bf16 is for
a GPU run: the interpreter computes bf16 dots wrongly (moe_quant's int8 kernel too: rel err ~1e8 there, 1.7e-7 in
fp32)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# fp32 activations on every type (each type's block decode, the fp32 dot); fp16 (the other dot: weights cast to the
# activations' dtype, the same code for every type) on the 32-blocks and one K-quant, not on Q5_K and Q6_K: each
# K-quant case costs ~2.5 s in the interpreter, and their decode is already checked in fp32 (24 cases took 21 s,
# these 20 take ~16 s)
FP16_QTYPES = ("Q8_0", "Q5_0", "Q5_1", "Q4_K")
CHILD = ("import json, torch; from engine.kernels.gguf_moe import max_rel_errs; "
         "print(json.dumps({**max_rel_errs((torch.float32,)), "
         f"**max_rel_errs((torch.float16,), qtypes={FP16_QTYPES!r})}}))")


def test_gguf_kernel_matches_its_eager_oracle_under_the_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    errs = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(errs) == (6 + len(FP16_QTYPES)) * 2
    for case, err in errs.items():
        assert err < (1e-5 if case.endswith("float32") else 5e-3), (case, err)
