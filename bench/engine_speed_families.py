"""bench.engine_speed's families section: the exact path's step time of each mask-diffusion family (every step runs
the whole window, prefix + canvas + suffix, through the network), CPU fp32, random weights built in memory.

Rows: each family (Dream's Qwen2 with QKV bias and shifted logits, LLaDA's Llama) at the bench shape, an infill
window of `context` tokens around a `canvas`-token hole, `steps` steps, exact and with the opt-in dual cache
(engine.families.dual_cache, a full pass every `dual` steps), and the dual cache's agreement with the exact path:
the share of identical fills on `agreement_holes` holes cut from the standard library (random weights: it measures
how far the approximation moves a fill, not fill quality); and with `big` the 0.5B Qwen2 shape of
Open-dCoder (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocabulary 151,936, tied): a 32-token fill at
512 context (its default sampler: 32 steps, one token each), timed whole."""

from __future__ import annotations

import random
import sysconfig
import time
from pathlib import Path

import torch

# (network shape of DenseConfig) per row; vocabulary as the bench checkpoint's (8,192) unless given
SHAPES = {
    "bench": dict(vocab_size=8192, hidden_size=256, intermediate_size=512, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64),
    "qwen2-0.5b": dict(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, head_dim=64),
}


def _engine(family: str, shape: str, seed: int = 0):
    """A MaskEngine over a DenseLM of `shape` with random weights (no checkpoint files, no tokenizer)."""
    from engine.families import llada, qwen2_dream
    from engine.families.checkpoint import FamilyCheckpoint
    from engine.families.dense import DenseConfig, DenseLM
    from engine.families.mask_engine import MaskEngine

    fam = {"dream": qwen2_dream.FAMILY, "llada": llada.FAMILY}[family]
    dims = dict(SHAPES[shape])
    if family == "llada":
        dims["num_key_value_heads"] = dims["num_attention_heads"]  # MHA
    v = dims["vocab_size"]
    cfg = DenseConfig(family=family, rope_theta=1e6 if family == "dream" else 5e5, rms_norm_eps=1e-6,
                      qkv_bias=family == "dream", tie_word_embeddings=shape == "qwen2-0.5b",
                      shift_logits=family == "dream", mask_token_id=v - 1, pad_token_id=v - 2, bos_token_id=None,
                      eos_token_ids=(v - 2,), max_position_embeddings=32768, **dims)
    torch.manual_seed(seed)
    model = DenseLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) / p.shape[-1] ** 0.5 if p.dim() > 1 else 1 + 0.1 * torch.randn(p.shape))
    config = FamilyCheckpoint(text=cfg, sampler=fam.settings(), eos_token_ids=cfg.eos_token_ids)
    return MaskEngine(fam, model.eval().requires_grad_(False), config, None, None, torch.device("cpu"),
                      torch.float32, Path(f"random-{family}-{shape}"))


def _window(eng, context: int, g: torch.Generator) -> list[int]:
    """An infill context: `context` random ids with the hole's one mask id in the middle."""
    ids = torch.randint(0, eng.vocab_size - 2, (context,), generator=g).tolist()
    return ids[:context // 2] + [eng.config.text.mask_token_id] + ids[context // 2:]


def time_fill(eng, context: int, canvas: int, steps: int, repeats: int) -> dict:
    """Median of `repeats` fills (one warm-up excluded): the fill's ms and ms per step."""
    g = torch.Generator().manual_seed(0)
    runs = []
    for i in range(repeats + 1 if repeats else 1):  # repeats 0: one run, no warm-up
        ctx = _window(eng, context, g)
        t = time.perf_counter()
        res = eng.infill(ctx, canvas_length=canvas, steps=steps, seed=i)
        dt = (time.perf_counter() - t) * 1e3
        if i or not repeats:
            runs.append((dt, res.steps))
    runs.sort()
    ms, n = runs[len(runs) // 2]
    params = sum(p.numel() for p in eng.model.parameters())
    return {"params_m": round(params / 1e6, 1), "context": context, "canvas": canvas, "steps": n,
            "exact_fill_ms": round(ms, 1), "exact_ms_per_step": round(ms / n, 2),
            "window_tokens": context + canvas}


def holes(n: int, side: int, seed: int = 0) -> list[list[int]]:
    """`n` infill contexts cut from Python's standard library (files in sorted order, positions from `seed`):
    `side` tokens of code either side of the hole's mask id, tokenized by the families' tiny byte-level tokenizer."""
    from engine.testing.families import QWEN_SPECIAL, byte_tokenizer

    tok = byte_tokenizer(QWEN_SPECIAL)
    mask = tok.token_to_id("<|mask|>")
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        ids = tok.encode(rng.choice(files).read_text(errors="replace")[:20_000]).ids
        if len(ids) > 2 * side + 1:
            at = rng.randrange(side, len(ids) - side)
            out.append(ids[at - side:at] + [mask] + ids[at:at + side])
    return out


def agreement(family: str, n: int, dual: int, canvas: int = 8, side: int = 32) -> dict:
    """Share of `n` held-out holes whose fill with the dual cache (a full pass every `dual` steps) is identical to
    the exact path's, at the bench shape with random weights (one token per step)."""
    exact, cached = _engine(family, "bench"), _engine(family, "bench")
    cached.dual_cache = dual
    mask = exact.config.text.mask_token_id
    same = 0
    for i, ctx in enumerate(holes(n, side)):
        ctx = [mask if t == ctx[side] and j == side else t for j, t in enumerate(ctx)]
        same += exact.infill(ctx, canvas_length=canvas, seed=i).ids == cached.infill(ctx, canvas_length=canvas,
                                                                                      seed=i).ids
    return {"holes": n, "identical": same, "share": round(same / max(n, 1), 3), "refresh_steps": dual,
            "canvas": canvas, "context": 2 * side}


def run_families(context: int, canvas: int, steps: int, repeats: int, big: bool = False,
                 big_steps: int = 32, agreement_holes: int = 200, dual: int = 4) -> dict:
    out = {}
    for family in ("dream", "llada"):
        out[family] = time_fill(_engine(family, "bench"), context, canvas, steps, repeats)
        cached = _engine(family, "bench")
        cached.dual_cache = dual
        r = out[family]
        c = time_fill(cached, context, canvas, steps, repeats)
        r.update(dual_cache_ms_per_step=c["exact_ms_per_step"], dual_cache_fill_ms=c["exact_fill_ms"],
                 dual_cache_refresh_steps=dual, dual_cache_speedup=round(r["exact_fill_ms"] / c["exact_fill_ms"], 2))
        print(f"{family:<8}{r['params_m']:>8.1f}M  window {r['window_tokens']}  exact {r['exact_ms_per_step']:.1f} "
              f"ms/step, fill {r['exact_fill_ms']:.0f} ms ({r['steps']} steps); dual cache (refresh every {dual}) "
              f"{c['exact_ms_per_step']:.1f} ms/step: {r['dual_cache_speedup']:.2f}x")
        if agreement_holes:
            r["dual_cache_agreement"] = a = agreement(family, agreement_holes, dual)
            print(f"{'':<8}dual cache vs exact: {a['identical']}/{a['holes']} held-out holes identical "
                  f"(random weights, {a['context']}-token context, {a['canvas']}-token hole)")
    if big:
        eng = _engine("dream", "qwen2-0.5b")
        r = out["dream_qwen2_0.5b"] = time_fill(eng, 512, 32, big_steps, 0)
        r["fill_32_steps_ms"] = round(r["exact_ms_per_step"] * 32, 1)
        r["note"] = (f"random weights, Open-dCoder's 0.5B Qwen2 shape, fp32, {torch.get_num_threads()} threads; "
                     f"{big_steps} steps timed (no warm-up): every exact step is the same computation over the "
                     "544-token window, so the 32-step fill (the default sampler: one token per step) is 32 x "
                     "ms/step unless big_steps is 32")
        print(f"0.5B Qwen2 (random weights): 32-token fill at 512 context: {r['exact_ms_per_step']:.0f} ms/step, "
              f"32 steps {r['fill_32_steps_ms'] / 1e3:.1f} s")
    return out
