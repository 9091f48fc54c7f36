"""Sliding-window layers keep only their window (plus one encoder chunk of rewind): memory bounded, logits still
equal to transformers' for contexts many windows long, prefix reuse still exact, reported bytes match."""

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion
from transformers.cache_utils import DynamicCache

from engine.engine import Engine
from engine.model.kv_cache import KVCache

CHUNK = 8


@pytest.fixture(scope="module")
def eng(tiny_checkpoints):
    # window 12, 3 sliding layers + 1 full; 8-token encoder chunks: sliding layers keep 11 + 8 tokens
    return Engine.from_pretrained(tiny_checkpoints["sliding_heavy"], device="cpu", encode_chunk=CHUNK)


def _context(eng, n, seed=0):
    return torch.randint(3, eng.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_sliding_layers_keep_their_window_and_full_layers_everything(eng):
    eng.clear_prefix_cache()
    w = eng.config.text.sliding_window
    for n in (5, 40, 200):
        cache, _ = eng._encode_context(_context(eng, n))
        for spec, k, v in zip(eng.config.text.layers, cache.keys, cache.values, strict=True):
            want = min(n, w - 1 + CHUNK) if spec.sliding else n
            assert k.shape[2] == v.shape[2] == want
            assert k.untyped_storage().nbytes() == k.numel() * k.element_size()  # not a view of a longer tensor
        assert cache.nbytes() == eng.kv_bytes(n)
    assert eng.kv_bytes(10_000) - eng.kv_bytes(9_999) == eng.kv_bytes_per_token()
    full = [s for s in eng.config.text.layers if not s.sliding]
    assert eng.kv_bytes_per_token() == sum(2 * s.num_kv_heads * s.head_dim * 4 for s in full)


def test_logits_match_transformers_many_windows_in(eng, tiny_checkpoints):
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(tiny_checkpoints["sliding_heavy"]).eval()
    g = torch.Generator().manual_seed(5)
    ctx = torch.tensor([_context(eng, 77, seed=1)])  # six windows and a bit; not a multiple of the chunk
    canvas = torch.randint(0, eng.vocab_size, (1, 16), generator=g)
    with torch.no_grad():
        cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
        ref.model.encoder(input_ids=ctx, cache=cache)
        want = ref(decoder_input_ids=canvas, cache=cache).logits
    eng.clear_prefix_cache()
    ours, _ = eng._encode_context(ctx[0].tolist())
    with torch.inference_mode():
        got = eng.model.decode(canvas, ours, None)
    assert (got - want).abs().max().item() <= 1e-4
    assert want.abs().max() > 1.0
    full = KVCache()  # the same chunks, every token kept on every layer (as before windows were dropped)
    for start in range(0, ctx.shape[1], CHUNK):
        full = eng.model.encode(ctx[:, start:start + CHUNK], full, slack=10**6)
    assert full.keys[0].shape[2] == 77 and ours.keys[0].shape[2] == 11 + CHUNK
    with torch.inference_mode():
        assert torch.equal(eng.model.decode(canvas, full, None), got)


def test_prefix_reuse_stays_exact_and_falls_back_to_cold_past_the_window(eng):
    ctx = _context(eng, 90, seed=2)
    eng.clear_prefix_cache()
    cold = eng.infill(ctx, canvas_length=16, steps=3, seed=4)
    typed = ctx[:-1] + [7, 8] + ctx[-1:]  # a keystroke at the end: resume at the last chunk boundary
    warm = eng.infill(typed, canvas_length=16, steps=3, seed=4)
    assert warm.reused_prefix_tokens == (len(ctx) - 1) // CHUNK * CHUNK
    eng.clear_prefix_cache()
    assert eng.infill(typed, canvas_length=16, steps=3, seed=4).ids == warm.ids
    # an edit 50 tokens back: the sliding layers no longer hold the window before it, so the context is encoded cold
    eng.infill(ctx, canvas_length=16, steps=3, seed=4)
    edited = ctx[:40] + [9] + ctx[41:]
    res = eng.infill(edited, canvas_length=16, steps=3, seed=4)
    assert res.reused_prefix_tokens == 0
    eng.clear_prefix_cache()
    assert eng.infill(edited, canvas_length=16, steps=3, seed=4).ids == res.ids
    assert cold.steps == 3


def test_truncation_below_the_window_is_refused(eng):
    eng.clear_prefix_cache()
    cache, _ = eng._encode_context(_context(eng, 100))
    floor = cache.rewind_floor()
    assert floor == 100 - CHUNK
    assert cache.truncated(floor).length == floor
    with pytest.raises(ValueError, match="cannot truncate"):
        cache.truncated(floor - 1)
