"""Seeded canvases (`init_ids`, `start_noise`): token-identical to transformers' `generate(decoder_input_ids=...)` in
reference-compatible mode, the corruption level's two ends with both noise sources, and the invariant that a model
confident in the seed gives it back at start_noise 0."""

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion

from engine.denoising.denoise import CounterNoise, DenoiseState
from engine.denoising.sampler import vocab_pass_torch
from engine.engine import Engine
from engine.seam import seed_canvases
from engine.testing.tiny import TINY_VARIANTS
from engine.tools.profiling import count_ops

VARIANTS = list(TINY_VARIANTS)


def _pair(path):
    return (Engine.from_pretrained(path, device="cpu", dtype="float32"),
            DiffusionGemmaForBlockDiffusion.from_pretrained(path, dtype=torch.float32).eval())


def _cut(eng, seq: list[int]) -> list[int]:
    eos, pad = eng.config.eos_token_ids, eng.config.text.pad_token_id
    stop = next((i for i, t in enumerate(seq) if t in eos), len(seq))
    return [t for t in seq[:stop] if t != pad]


def _ref(eng, ref, ctx, canvas, max_new_tokens, steps, state=None, seed=0):
    """transformers' ids from `decoder_input_ids=canvas` (1, C), the global generator seeded or set to `state`."""
    if state is None:
        torch.manual_seed(seed)
    else:
        torch.set_rng_state(state)
    out = ref.generate(torch.tensor([ctx]), max_new_tokens=max_new_tokens, max_denoising_steps=steps,
                       decoder_input_ids=canvas)
    return _cut(eng, out.sequences[0, len(ctx):].tolist())


def test_a_seed_ends_like_an_answer_and_is_cut_into_canvases():
    assert seed_canvases([5, 6], 0.0, 4, 100, eos_id=1, pad_id=0) == [(5, 6, 1, 0)]
    assert seed_canvases([5, 6, 7, 8], 0.5, 4, 100, eos_id=1, pad_id=0) == [(5, 6, 7, 8), (1, 0, 0, 0)]
    assert seed_canvases([5] * 6, 0.0, 4, 100, eos_id=1, pad_id=0) == [(5, 5, 5, 5), (5, 5, 1, 0)]
    assert seed_canvases([5, 6], 1.0, 4, 100, eos_id=1, pad_id=0) == []  # full noise: the seed is unused
    assert seed_canvases(None, 0.0, 4, 100, eos_id=1, pad_id=0) == []
    with pytest.raises(ValueError, match="start_noise"):
        seed_canvases([5], 1.5, 4, 100, eos_id=1, pad_id=0)
    with pytest.raises(ValueError, match="init_ids"):
        seed_canvases([100], 0.0, 4, 100, eos_id=1, pad_id=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_reference_mode_at_noise_zero_is_token_identical_to_generate_with_decoder_input_ids(tiny_checkpoints,
                                                                                              variant):
    eng, ref = _pair(tiny_checkpoints[variant])
    g = torch.Generator().manual_seed(5)
    changed = 0
    for seed, n_ctx, n_seed in [(0, 9, 10), (1, 23, 15), (2, 41, 3)]:
        ctx = torch.randint(3, eng.vocab_size, (n_ctx,), generator=g).tolist()
        init = torch.randint(3, eng.vocab_size, (n_seed,), generator=g).tolist()
        canvas = torch.tensor([seed_canvases(init, 0.0, 16, eng.vocab_size, eng.config.eos_token_ids[0],
                                               eng.config.text.pad_token_id)[0]])
        for max_new in (16, 32):  # one canvas, and a second one that starts from noise on both sides
            want = _ref(eng, ref, ctx, canvas, max_new, steps=6, seed=seed)
            got = eng.generate_ids(ctx, max_new_tokens=max_new, steps=6, seed=seed, reference_compatible=True,
                                   init_ids=init, start_noise=0.0)
            assert got == want
            unseeded = eng.generate_ids(ctx, max_new_tokens=max_new, steps=6, seed=seed, reference_compatible=True)
            changed += unseeded != got
    assert changed  # the seed reached the decoder


@pytest.mark.parametrize("noise", [0.3, 0.7])
def test_reference_mode_between_the_ends_draws_its_mask_first(tiny_mixed, noise):
    """0 < x < 1 draws u = rand(1, C) first, then `generate`'s own random canvas: equal to `generate` from the
    generator's state after u with decoder_input_ids = where(u < x, that random canvas, seed)."""
    eng, ref = _pair(tiny_mixed)
    v, c = eng.vocab_size, 16
    ctx, init = list(range(3, 20)), list(range(40, 52))
    seed_canvas = torch.tensor([seed_canvases(init, noise, c, v, eng.config.eos_token_ids[0],
                                                eng.config.text.pad_token_id)[0]])
    torch.manual_seed(3)
    u = torch.rand((1, c))
    after_u = torch.get_rng_state()
    fresh = torch.randint(0, v, (1, c))
    corrupted = torch.where(u < noise, fresh, seed_canvas)
    assert 0 < (corrupted != seed_canvas).sum() < c  # really a partial corruption
    want = _ref(eng, ref, ctx, corrupted, 16, steps=6, state=after_u)
    got = eng.generate_ids(ctx, max_new_tokens=16, steps=6, seed=3, reference_compatible=True, init_ids=init,
                           start_noise=noise)
    assert got == want


@pytest.mark.parametrize("reference", [False, True])
def test_full_noise_ignores_the_seed(tiny_mixed, reference):
    eng = Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32")
    ctx = list(range(3, 30))
    kw = dict(canvas_length=16, steps=6, seed=4, reference_compatible=reference)
    assert eng.infill(ctx, **kw).ids == eng.infill(ctx, init_ids=[7] * 10, start_noise=1.0, **kw).ids


def test_the_engines_noise_starts_from_the_seed_corrupted_at_the_level_asked():
    c, v = 512, 1000
    seed = torch.arange(c)[None] + 100
    st, noise = DenoiseState.allocate(c, 8, 1, torch.device("cpu"), torch.float32), CounterNoise(vocab_pass_torch)
    st.start(noise, 9, v, 4, 0.4, 0.8, 0.1, 0.005)
    unseeded = st.canvas.clone()
    st.start(noise, 9, v, 4, 0.4, 0.8, 0.1, 0.005, seed, 1.0)
    assert torch.equal(st.canvas, unseeded)
    st.start(noise, 9, v, 4, 0.4, 0.8, 0.1, 0.005, seed, 0.0)
    assert torch.equal(st.canvas, seed)
    st.start(noise, 9, v, 4, 0.4, 0.8, 0.1, 0.005, seed, 0.5)
    replaced = st.canvas != seed
    assert 0.4 < replaced.float().mean() < 0.6
    assert torch.equal(st.canvas[replaced], unseeded[replaced])  # replaced by the unseeded canvas's noise


def _echo(eng: Engine, margin: float = 40.0) -> Engine:
    """A model that is confident its input canvas is right: logits peaked on each position's own id."""
    v = eng.vocab_size

    def decode_step(canvas, soft, kv):
        return torch.nn.functional.one_hot(canvas, v).to(torch.float32) * margin

    eng.model.decode_step = decode_step
    return eng


@pytest.mark.parametrize("reference", [False, True])
def test_noise_zero_on_a_confident_model_returns_the_seed(tiny_mixed, reference):
    """At x = 0 the first step reads the seed; every position the model is confident about is accepted (its
    entropy is ~0, far under the bound) and sampled back to itself, so nothing is renoised and the canvas is
    stable from the first step: the fill is the seed. (A model unsure of a position would renoise it.)"""
    eng = _echo(Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32"))
    ctx = list(range(3, 30))
    for seed, init in [(0, [5, 9, 11, 40]), (1, list(range(60, 75))), (2, list(range(80, 110)))]:
        kw = dict(canvas_length=16, steps=8, seed=seed, reference_compatible=reference, max_canvases=3)
        res = eng.infill(ctx, init_ids=init, start_noise=0.0, **kw)
        assert res.ids == init
        assert res.steps <= 2 * (-(-(len(init) + 1) // 16))  # stable at once: two steps a canvas
        assert eng.infill(ctx, init_ids=init, start_noise=1.0, **kw).ids != init  # from noise it echoes noise


def test_a_seeded_fill_syncs_at_most_once_per_step(tiny_mixed):
    eng = Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32")
    ctx = list(range(3, 30))
    with count_ops() as c:
        res = eng.infill(ctx, canvas_length=16, steps=6, seed=1, max_canvases=2, entropy_bound=1e-9,
                         init_ids=list(range(40, 60)), start_noise=0.5, on_step=lambda d: None)
    assert res.steps >= 2
    assert c.sync_count <= res.steps, dict(c.syncs)


def test_check_reports_how_much_of_its_own_answer_a_checkpoint_keeps(tiny_mixed):
    from engine.tools.check import run_check

    report = run_check(str(tiny_mixed), device="cpu")
    assert report["ok"] is True, report
    seeded = report["seeded"]
    kept, total = map(int, seeded["kept"].split("/"))
    assert seeded["start_noise"] == 0.0 and 0 <= kept <= total and seeded["identical"] is (kept == total)
