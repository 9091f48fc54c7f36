"""The denoising step is capturable: torch.compile(fullgraph=True) traces it whole (no graph break) on CPU, the
traced step computes what the eager one does, and a compiled engine keeps one graph per bucket. Reference mode's
noise source (a torch.Generator) is not traceable: its steps stay eager on a compiling engine."""

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion
from transformers.cache_utils import DynamicCache

from engine.denoising.denoise import PROB_SCALE, CounterNoise, GeneratorNoise, denoise_step
from engine.denoising.runner import Schedule, StepRunner, capacity_for
from engine.denoising.sampler import vocab_pass_torch
from engine.engine import Engine
from engine.model.kv_cache import KVCache

SCHEDULE = Schedule(key=11, steps=4, t_min=0.4, t_max=0.8, bound=0.1, confidence=0.005)


@pytest.fixture(scope="module")
def eng(tiny_mixed):
    return Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32")


def _run(eng, context_tokens: int, compile: bool = False, one_per_step: bool = False, noise=None):
    ids = torch.arange(3, 3 + context_tokens)[None] % eng.vocab_size
    with torch.inference_mode():
        cache = eng.model.encode(ids, KVCache())
        runner = StepRunner(eng.model, vocab_pass_torch, compile=compile)
        return runner.start(cache, 16, 2, one_per_step, SCHEDULE, noise)


@pytest.mark.parametrize("one_per_step", [False, True])
def test_the_step_traces_as_one_graph(eng, one_per_step):
    run = _run(eng, 37, compile=True, one_per_step=one_per_step)  # a bucketed (masked) workspace
    assert run.kv.capacity == 256 and run.kv.masks[1] is not None
    with torch.inference_mode():
        explained = torch._dynamo.explain(denoise_step)(eng.model, run.kv, run.state, CounterNoise(vocab_pass_torch),
                                                        one_per_step)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def test_a_bucketed_step_equals_the_exact_one(eng):
    # the same context in an exact workspace and in a 256-slot bucket with the unused slots masked
    exact, bucketed = _run(eng, 37), _run(eng, 37, compile=True)
    with torch.inference_mode():
        a = eng.model.decode_step(exact.state.canvas, exact.state.soft, exact.kv)
        b = eng.model.decode_step(bucketed.state.canvas, bucketed.state.soft, bucketed.kv)
        torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
        for _ in range(3):
            denoise_step(eng.model, exact.kv, exact.state, CounterNoise(vocab_pass_torch))
            denoise_step(eng.model, bucketed.kv, bucketed.state, CounterNoise(vocab_pass_torch))
    torch.testing.assert_close(bucketed.state.soft, exact.state.soft, rtol=1e-3, atol=1e-3)  # 3 steps of drift
    c = exact.state.canvas.shape[1]
    assert torch.equal(bucketed.state.out[:c + 2], exact.state.out[:c + 2])  # canvas, accepted, stopped
    # the tokens' probabilities (in units of 1/PROB_SCALE) drift with the logits
    torch.testing.assert_close(bucketed.state.out[c + 2:] / PROB_SCALE, exact.state.out[c + 2:] / PROB_SCALE,
                               rtol=0, atol=1e-4)


def test_the_traced_step_matches_transformers_logits(eng, tiny_mixed):
    """AOT-traced (functionalized, decomposed) decoder step against the reference; the Inductor-compiled one is
    checked by the slow test below."""
    run = _run(eng, 37, compile=True)
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(tiny_mixed).eval()
    ids = torch.arange(3, 40)[None] % eng.vocab_size
    with torch.no_grad():
        cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ids, cache=cache)
        want = ref(decoder_input_ids=run.state.canvas, cache=cache).logits
    traced = torch.compile(eng.model.decode_step, fullgraph=True, backend="aot_eager")
    with torch.inference_mode():
        got = eng.model.softcap(traced(run.state.canvas, run.state.soft, run.kv))
    assert (got - want).abs().max().item() <= 1e-4
    assert want.abs().max() > 1.0


def test_reference_mode_steps_eagerly_on_a_compiling_engine(eng, tiny_mixed):
    """Its ids stay those of a plain engine's reference mode, which tests/engine/test_parity.py checks against
    transformers' generate (a compiled decoder's sums are not bit-identical to eager ones)."""
    run = _run(eng, 37, compile=True, noise=GeneratorNoise(torch.Generator().manual_seed(0), 4, 0.4, 0.8))
    assert run.kv.capacity is None and not run.graphed  # the exact context, no bucket
    compiling = Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32", compile=True)
    ctx = list(range(3, 40))
    kw = dict(canvas_length=16, steps=4, seed=3, max_canvases=2, reference_compatible=True)
    assert compiling.infill(ctx, **kw).ids == eng.infill(ctx, **kw).ids


def test_capacity_buckets():
    assert capacity_for(37, compile=False, graphs=False) is None
    assert capacity_for(37, compile=True, graphs=False) == 256
    assert capacity_for(300, compile=True, graphs=True) == 512
    assert [capacity_for(n, compile=False, graphs=True) for n in (1, 256, 257, 1000, 1025, 5000)] == \
        [256, 256, 320, 1024, 1280, 5120]
    for n in range(1, 40_000, 97):  # graphs: under 25% padding past 256 tokens
        cap = capacity_for(n, compile=False, graphs=True)
        assert n <= cap and (cap <= 256 or cap < 1.25 * n)


@pytest.mark.slow
def test_the_inductor_compiled_engine_matches_transformers_and_keeps_its_graph(eng, tiny_mixed):
    """Inductor on CPU: minutes of C++ compilation on a shared 2-core machine, hence opt-in (-m slow)."""
    compiled = Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32", compile=True)
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(tiny_mixed).eval()
    ids = torch.arange(3, 40)[None] % eng.vocab_size
    run = _run(compiled, 37, compile=True)
    with torch.no_grad():
        cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ids, cache=cache)
        want = ref(decoder_input_ids=run.state.canvas, cache=cache).logits
    step = torch.compile(compiled.model.decode_step, fullgraph=True)
    with torch.inference_mode():
        got = compiled.model.softcap(step(run.state.canvas, run.state.soft, run.kv))
    assert (got - want).abs().max().item() <= 1e-4
    from torch._dynamo.utils import counters

    ctx = compiled.context_ids("def add(a, b):\n    return ", "\n")
    a = compiled.infill(ctx, canvas_length=16, steps=4, seed=3)
    graphs = counters["stats"]["unique_graphs"]
    b = compiled.infill(ctx + ctx[-3:], canvas_length=16, steps=4, seed=3)  # another length, same bucket
    assert counters["stats"]["unique_graphs"] == graphs  # no recompilation
    assert compiled.infill(ctx, canvas_length=16, steps=4, seed=3).ids == a.ids
    assert a.steps >= 1 and b.steps >= 1
