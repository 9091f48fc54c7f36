"""Host syncs counted on CPU (engine.tools.profiling): a fill reads the device once per denoising step (the stop
decision and the draft), the decoder step and the MoE never; the expert GEMM has no per-expert loop."""

import pytest
import torch

from engine.denoising.denoise import CounterNoise, denoise_step
from engine.denoising.runner import Schedule, StepRunner
from engine.denoising.sampler import vocab_pass_torch
from engine.engine import Engine
from engine.model.kv_cache import KVCache
from engine.model.moe import MoE, grouped_linear
from engine.testing.tiny import TINY_VARIANTS
from engine.tools.profiling import count_ops


@pytest.fixture(scope="module")
def eng(tiny_mixed):
    return Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32")


def test_the_counter_sees_host_reads_and_data_dependent_shapes():
    x = torch.arange(8)
    with count_ops() as c:
        x.sum().item()
        torch.bincount(x)
        x[x > 3]
        x.tolist()
        torch.sort(x)
    assert c.sync_count == 4, c.syncs


@pytest.mark.parametrize("canvases", [1, 2])
def test_a_fill_syncs_at_most_once_per_step(eng, canvases):
    ctx = eng.context_ids("def add(a, b):\n    return ", "\n")
    eng.clear_prefix_cache()
    with count_ops() as c:
        res = eng.infill(ctx, canvas_length=16, steps=6, seed=1, max_canvases=canvases, entropy_bound=1e-9,
                         on_step=lambda d: None)
    assert res.steps >= 2
    assert c.sync_count <= res.steps, dict(c.syncs)


def test_the_decoder_step_never_syncs(eng):
    cache = eng.model.encode(torch.arange(3, 40)[None], KVCache())
    runner = StepRunner(eng.model, vocab_pass_torch)
    run = runner.start(cache, 16, 2, False, Schedule(key=7, steps=4, t_min=0.4, t_max=0.8, bound=0.1,
                                                     confidence=0.005))
    with count_ops() as c:
        for _ in range(3):
            denoise_step(eng.model, run.kv, run.state, CounterNoise(vocab_pass_torch))
    assert c.sync_count == 0, dict(c.syncs)
    assert int(run.state.step) == 3


@pytest.mark.parametrize("grouped", [True, False])
def test_moe_routes_on_the_device(grouped):
    from engine.config import parse_text_config

    cfg = parse_text_config(dict(TINY_VARIANTS["sliding_heavy"], vocab_size=64))
    torch.manual_seed(0)
    moe = MoE(cfg)
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(0, 0.3)
    moe.use_grouped_mm = grouped
    x = torch.randn(37, cfg.hidden_size)
    with count_ops() as c:
        w, idx = moe.route(x)
        y = moe(x, w, idx)
    assert c.sync_count == 0, dict(c.syncs)
    want = torch.zeros_like(x)  # the reference's per-expert loop, as transformers computes it
    for e in range(cfg.num_experts):
        tok, k = (idx == e).nonzero(as_tuple=True)
        gate, up = (x[tok] @ moe.gate_up_proj[e].T).chunk(2, dim=-1)
        h = (torch.nn.functional.gelu(gate, approximate="tanh") * up) @ moe.down_proj[e].T
        want.index_add_(0, tok, h * w[tok, k, None])
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)


def test_grouped_linear_fallback_matches_grouped_mm():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(5, 24, 16, generator=g)
    counts = torch.tensor([3, 0, 7, 1, 4])  # an empty group too
    x = torch.randn(int(counts.sum()), 16, generator=g)
    offsets = counts.cumsum(0).to(torch.int32)
    with count_ops() as c:
        padded = grouped_linear(x, w, offsets, max_rows=7, use_grouped_mm=False)
    assert c.sync_count == 0, dict(c.syncs)
    want = torch.cat([x[s:e] @ w[i].T for i, (s, e) in enumerate(zip([0, *offsets[:-1].tolist()],
                                                                        offsets.tolist(), strict=True))])
    torch.testing.assert_close(padded, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grouped_linear(x, w, offsets, max_rows=7, use_grouped_mm=True), want,
                               rtol=1e-5, atol=1e-5)


def test_a_quantized_expert_weight_plugs_into_grouped_linear():
    class Halved:  # stands for a quantized stack: any object with shape and grouped_linear
        def __init__(self, w):
            self.w, self.shape = w, w.shape

        def grouped_linear(self, x, offsets):
            return grouped_linear(x, self.w, offsets, max_rows=x.shape[0]) * 0.5

    w = torch.randn(3, 8, 4)
    x, offsets = torch.randn(6, 4), torch.tensor([2, 4, 6], dtype=torch.int32)
    torch.testing.assert_close(grouped_linear(x, Halved(w), offsets, 2), 0.5 * grouped_linear(x, w, offsets, 2))

    from engine.config import parse_text_config

    moe = MoE(parse_text_config(dict(TINY_VARIANTS["mixed"], vocab_size=64)))
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(5, moe.router_scale.shape[0])
    w, idx = moe.route(x)
    dense = moe(x, w, idx)
    moe.set_experts(Halved(moe.gate_up_proj.detach()), moe.down_proj.detach())
    assert not isinstance(moe.gate_up_proj, torch.Tensor)
    # gelu(g/2) * (u/2) is not half of gelu(g) * u: check the quantized path ran, not an algebraic identity
    assert not torch.allclose(moe(x, w, idx), dense)
    with pytest.raises(ValueError, match="shape"):
        moe.set_experts(torch.zeros(1, 2, 3), moe.down_proj)
