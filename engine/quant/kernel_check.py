"""The quantized MoE kernel against its eager oracle, in a child process under Triton's interpreter on a CPU.

TRITON_INTERPRET=1 must be set before triton is first imported, which a test session or a benchmark cannot promise,
so `run_kernel` starts `python -m engine.quant.kernel_check IN OUT` with the switch on; cases and results travel as
safetensors files. `cases` builds the inputs (every format, ragged K and N, empty experts, a one-expert linear);
`max_rel_err` compares the kernel's outputs with `reference.moe_quant_reference`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.kernels.reference import moe_quant_reference
from engine.quant.formats import quantize

ROOT = Path(__file__).resolve().parents[2]
# (name, fmt, symmetric, experts, N, K, rows per expert); K = 96 and 200 make partial int4 groups and K tiles.
SHAPES = [
    ("int8", "int8", False, 4, 48, 96, (5, 0, 17, 3)),
    ("fp8", "fp8", False, 4, 40, 200, (0, 9, 1, 22)),
    ("int4_asym", "int4", False, 3, 64, 200, (13, 4, 0)),
    ("int4_sym", "int4", True, 3, 33, 160, (2, 18, 7)),
    ("int4_linear", "int4", False, 1, 24, 256, (11,)),
]


def cases(seed: int = 0) -> dict[str, torch.Tensor]:
    """Flat name -> tensor map of every case: {case}.x, .qweight, .scale, [.zero], .offsets."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, fmt, sym, e, n, k, counts in SHAPES:
        w = torch.randn(e, n, k, generator=g) / k**0.5
        w[0, 0] *= 20  # an outlier row: its scale differs from the rest by an order of magnitude
        p = quantize(w, fmt, symmetric=sym)
        out[f"{name}.x"] = torch.randn(sum(counts), k, generator=g)
        out[f"{name}.qweight"] = p.qweight.view(torch.uint8) if fmt == "fp8" else p.qweight
        out[f"{name}.scale"] = p.scale
        if p.zero is not None:
            out[f"{name}.zero"] = p.zero
        out[f"{name}.offsets"] = torch.cumsum(torch.tensor(counts), 0).to(torch.int32)
    return out


def _parts(t: dict[str, torch.Tensor], name: str):
    from engine.quant.formats import QuantParts

    fmt = next(f for n, f, *_ in SHAPES if n == name)
    q = t[f"{name}.qweight"]
    if fmt == "fp8":
        q = q.view(torch.float8_e4m3fn)
    k = t[f"{name}.x"].shape[1]
    shape = (*q.shape[:2], k)
    return QuantParts(fmt, shape, q, t[f"{name}.scale"], t.get(f"{name}.zero"))


def max_rel_err(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per case: max |kernel - reference| / max |reference|, on the same quantized weights."""
    errs = {}
    for name, *_ in SHAPES:
        p = _parts(inputs, name)
        ref = moe_quant_reference(inputs[f"{name}.x"], p.qweight, p.scale, p.zero, p.fmt, inputs[f"{name}.offsets"],
                                  p.group_size)
        got = outputs[name].float()
        errs[name] = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    return errs


def run_kernel(inputs: dict[str, torch.Tensor], timeout: float = 600) -> dict[str, torch.Tensor]:
    """Run every case through the Triton kernel in an interpreter child; returns name -> (S, N) output."""
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "in.safetensors", Path(d) / "out.safetensors"
        save_file({k: v.contiguous() for k, v in inputs.items()}, str(src))
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
        r = subprocess.run([sys.executable, "-m", "engine.quant.kernel_check", str(src), str(dst)], env=env,
                           capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if r.returncode:
            raise RuntimeError(f"kernel child failed:\n{r.stderr[-4000:]}")
        return load_file(str(dst))


def _child(src: str, dst: str) -> None:
    from triton.runtime.interpreter import InterpretedFunction

    from engine.kernels.moe_quant import _moe_quant_kernel, moe_quant_linear

    assert isinstance(_moe_quant_kernel, InterpretedFunction), "not the interpreted kernel"
    t = load_file(src)
    out = {}
    for name, *_ in SHAPES:
        out[name] = moe_quant_linear(t[f"{name}.x"], _parts(t, name), t[f"{name}.offsets"])
    save_file(out, dst)


def main(argv: list[str] | None = None) -> int:
    """The child's command line (run by `run_kernel` with TRITON_INTERPRET=1, not by hand)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m engine.quant.kernel_check",
                                 description="The Triton MoE kernel on the cases in IN (safetensors), outputs to OUT; "
                                 "started by engine.quant.kernel_check.run_kernel with TRITON_INTERPRET=1.")
    ap.add_argument("src", metavar="IN", help="the cases (a safetensors file written by run_kernel)")
    ap.add_argument("dst", metavar="OUT", help="where the kernel's outputs go (a safetensors file)")
    args = ap.parse_args(argv)
    _child(args.src, args.dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
