"""engine.kernels.moe_quant: the Triton grouped GEMM against its eager oracle (in Triton's interpreter on a CPU), and
its device-side block table."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.moe_quant import block_table, triton
from engine.quant.kernel_check import SHAPES, cases, max_rel_err, run_kernel


@pytest.mark.skipif(triton is None, reason="Triton is not installed")
def test_kernel_matches_the_oracle_on_the_same_quantized_weights():
    inputs = cases(seed=3)
    errs = max_rel_err(inputs, run_kernel(inputs))
    assert set(errs) == {name for name, *_ in SHAPES}
    assert max(errs.values()) <= 1e-3, errs


def test_block_table_covers_every_row_once():
    counts = [5, 0, 17, 3, 0, 16]
    offsets = torch.cumsum(torch.tensor(counts), 0).to(torch.int32)
    bm = 4
    expert, row = block_table(offsets, sum(counts), bm)
    covered = []
    for e, r in zip(expert.tolist(), row.tolist(), strict=True):
        if e < 0:
            continue
        end = offsets[e].item()
        covered += [(e, i) for i in range(r, min(r + bm, end))]
    want = [(e, i) for e, (s, c) in enumerate(zip([0, *offsets[:-1].tolist()], counts, strict=True))
            for i in range(s, s + c)]
    assert sorted(covered) == want


@pytest.mark.parametrize("name", [name for name, *_ in SHAPES])
def test_torch_grouped_path_matches_the_oracle_without_a_host_sync(name, monkeypatch):
    """QuantWeight's device-generic torch path (what a GPU serves when its Triton kernel fails the self-check at
    load): one grouped GEMM over the dequantized stack, empty experts and partial int4 groups included, with no host
    read of the offsets. Run on CPU with engine.quant.cpu_matmul off: the CPU's own tiled path reads which experts
    were routed on the host, where that costs no device sync (tests/quant/test_cpu_quant.py checks its values)."""
    from engine.kernels.reference import moe_quant_reference
    from engine.quant import cpu_matmul
    from engine.quant.kernel_check import _parts
    from engine.quant.modules import QuantWeight
    from engine.tools.profiling import count_ops

    monkeypatch.setattr(cpu_matmul, "ENABLED", False)
    inputs = cases(seed=5)
    p, x, offsets = _parts(inputs, name), inputs[f"{name}.x"], inputs[f"{name}.offsets"]
    with count_ops() as c:
        got = QuantWeight(p).grouped_linear(x, offsets)
    assert c.sync_count == 0, dict(c.syncs)
    want = moe_quant_reference(x, p.qweight, p.scale, p.zero, p.fmt, offsets, p.group_size)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
