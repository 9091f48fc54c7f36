"""Every context length from one token to past the encoder chunk is bit-exact against transformers' DiffusionGemma:
logits (max |difference| 0.0) and generated ids in reference-compatible mode.

A one-token context is the case that broke (issue 21 item 5): every GEMM of the encoder then has one row, and MKL
computes a one-row GEMM as a GEMV whose kernel depends on the weight's address modulo 16 bytes. transformers holds
each projection where safetensors' mmap put it; the engine's stacked q/k/v and gate/up weights sat elsewhere, so
its logits were ~1e-5 off and sampled ids differed.
"""

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion

from engine.engine import Engine
from engine.loader import load_model
from engine.testing.tiny import ENGINE_FIX_VARIANTS, TINY_VARIANTS, build_tiny_checkpoint, generated_ids, logit_diff

VARIANTS = list(TINY_VARIANTS)


def _pair(path, **kw):
    return (Engine.from_pretrained(path, device="cpu", dtype="float32", **kw),
            DiffusionGemmaForBlockDiffusion.from_pretrained(path, dtype=torch.float32).eval())


def _boundaries(eng) -> list[int]:
    """1, 2, 3, around the sliding window and powers of two, and chunk - 1, chunk, chunk + 1."""
    w, chunk = eng.config.text.sliding_window, eng.encode_chunk
    near = {1, 2, 3, 4, w - 1, w, w + 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, chunk - 1, chunk, chunk + 1}
    return sorted(n for n in near if n >= 1)


def _case(eng, n: int, g: torch.Generator, canvas: int = 16):
    v = eng.vocab_size
    return (torch.randint(3, v, (1, n), generator=g), torch.randint(0, v, (1, canvas), generator=g),
            torch.randn(1, canvas, v, generator=g) * 4)


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_are_exact_at_every_length_boundary(tiny_checkpoints, variant):
    eng, ref = _pair(tiny_checkpoints[variant])
    g = torch.Generator().manual_seed(21)
    lengths = _boundaries(eng)
    assert lengths[0] == 1 and lengths[-1] == eng.encode_chunk + 1
    diffs = {n: logit_diff(eng, ref, *_case(eng, n, g)) for n in lengths}
    assert diffs == dict.fromkeys(lengths, 0.0)


def test_logits_are_exact_for_every_length_up_to_the_chunk(tiny_mixed):
    """Every length 1..chunk, through the path a fill takes outside reference-compatible mode (the prefix cache's
    chunked encode, one chunk here), cold and then served from the cache after a shared prefix."""
    eng, ref = _pair(tiny_mixed)
    g = torch.Generator().manual_seed(5)
    bad = {}
    for n in range(1, eng.encode_chunk + 1):
        ctx, canvas, sc = _case(eng, n, g)
        eng.clear_prefix_cache()
        cold, _ = eng._encode_context(ctx[0].tolist())
        diff = logit_diff(eng, ref, ctx, canvas, sc, cache=cold)
        if diff:
            bad[n] = diff
    assert bad == {}


def test_one_token_context_with_short_canvases(tiny_mixed):
    """One-row GEMMs in the decoder too: a canvas of one position (and two, three: other small-M kernels)."""
    eng, ref = _pair(tiny_mixed)
    g = torch.Generator().manual_seed(8)
    for n in (1, 2, 9):
        for c in (1, 2, 3, 16):
            assert logit_diff(eng, ref, *_case(eng, n, g, canvas=c)) == 0.0, (n, c)


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_ids_are_identical_at_every_length_boundary(tiny_checkpoints, variant):
    eng, ref = _pair(tiny_checkpoints[variant])
    g = torch.Generator().manual_seed(31)
    chunk, w = eng.encode_chunk, eng.config.text.sliding_window
    lengths = []
    for n in (1, 2, 3, w + 1, chunk - 1, chunk, chunk + 1):
        ctx = torch.randint(3, eng.vocab_size, (n,), generator=g).tolist()
        want, got = generated_ids(eng, ref, ctx, seed=n, max_new_tokens=32, steps=6)  # 2 canvases of 16
        assert got == want, n
        lengths.append(len(want))
    assert max(lengths) > 16  # some really span two canvases (the others met an eos)


@pytest.mark.parametrize("variant", list(ENGINE_FIX_VARIANTS))
def test_one_token_context_on_the_configs_transformers_loads_differently(tmp_path, variant):
    eng, ref = _pair(build_tiny_checkpoint(tmp_path / variant, variant, canvas_length=16, seed=40))
    g = torch.Generator().manual_seed(2)
    for n in (1, 2):
        assert logit_diff(eng, ref, *_case(eng, n, g)) == 0.0, n
        ctx = torch.randint(3, eng.vocab_size, (n,), generator=g).tolist()
        want, got = generated_ids(eng, ref, ctx, seed=n, max_new_tokens=32, steps=6)
        assert got == want, n


def test_a_small_encoder_chunk_keeps_its_boundaries_exact(tiny_mixed):
    """With a 16-token chunk: contexts of 15 and 16 tokens are one chunk (exact on the prefix-cache path), and 17
    is exact in reference-compatible mode, which encodes a context in one pass as transformers does."""
    eng, ref = _pair(tiny_mixed, encode_chunk=16)
    g = torch.Generator().manual_seed(4)
    for n in (1, 15, 16):
        ctx, canvas, sc = _case(eng, n, g)
        eng.clear_prefix_cache()
        cache, _ = eng._encode_context(ctx[0].tolist())
        assert logit_diff(eng, ref, ctx, canvas, sc, cache=cache) == 0.0, n
    for n in (1, 16, 17):
        ctx = torch.randint(3, eng.vocab_size, (n,), generator=g).tolist()
        want, got = generated_ids(eng, ref, ctx, seed=n, max_new_tokens=32, steps=6)
        assert got == want, n


def _one_row_weights(model):
    for layer in (*model.layers, *(model.enc_layers or ())):
        attn, mlp = layer.self_attn, layer.mlp
        projs = [p for p in (attn.q_proj, attn.k_proj, attn.v_proj) if p is not None]
        yield from zip(projs, attn.qkv_rows, strict=True)
        yield from zip((mlp.gate_proj, mlp.up_proj), mlp.gate_up_rows, strict=True)


@pytest.mark.parametrize("variant", ["mixed", "untied"])
def test_one_row_weights_sit_where_the_loaded_weights_sat(tmp_path, variant):
    """The weights a one-row input multiplies hold the projection's values at the address alignment (mod 64) the
    loader gave it, which is where transformers' copy of it sits (both map the same safetensors file)."""
    path = build_tiny_checkpoint(tmp_path / variant, variant, canvas_length=16)
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    loaded = load_model(path, eng.config.text, torch.device("cpu"), torch.float32)  # as loaded, never stacked
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path, dtype=torch.float32).eval()
    ref_q = ref.model.encoder.language_model.layers[0].self_attn.q_proj.weight
    enc = loaded.enc_layers if loaded.enc_layers is not None else loaded.layers
    assert ref_q.data_ptr() % 64 == enc[0].self_attn.q_proj.weight.data_ptr() % 64
    fresh = dict(loaded.named_parameters())
    names = {id(p): n for n, p in eng.model.named_modules()}
    pairs = list(_one_row_weights(eng.model))
    layers = len(eng.model.layers) * (2 if eng.model.enc_layers is not None else 1)
    assert len(pairs) >= 4 * layers  # q, k (+ v on sliding layers), gate, up of every layer
    for proj, w in pairs:
        src = fresh[f"{names[id(proj)]}.weight"]
        assert torch.equal(w, src)
        assert w.data_ptr() % 64 == src.data_ptr() % 64


def test_one_row_weights_allocate_nothing_when_the_stack_is_aligned(tmp_path):
    """Loaded as copies (fp32 -> bf16), every weight is 64-byte aligned and so is each view of the stack: the
    one-row weights are the stack's views, no second copy of a projection."""
    path = build_tiny_checkpoint(tmp_path / "m", "mixed", canvas_length=16)
    eng = Engine.from_pretrained(path, device="cpu", dtype="bfloat16")
    for layer in eng.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for stack, rows in ((attn.qkv, attn.qkv_rows), (mlp.gate_up, mlp.gate_up_rows)):
            assert stack is not None and rows
            assert all(w.untyped_storage().data_ptr() == stack.untyped_storage().data_ptr() for w in rows)
