"""bench.engine_speed's families section: the exact path's step time of each mask-diffusion family (every step runs
the whole window, prefix + canvas + suffix, through the network), CPU fp32, random weights built in memory.

Rows: each family (Dream's Qwen2 with QKV bias and shifted logits, LLaDA's Llama) at the bench shape, an infill
window of `context` tokens around a `canvas`-token hole, `steps` steps; and with `big` the 0.5B Qwen2 shape of
Open-dCoder (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocabulary 151,936, tied): a 32-token fill at
512 context (its default sampler: 32 steps, one token each), timed whole."""

from __future__ import annotations

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


def run_families(context: int, canvas: int, steps: int, repeats: int, big: bool = False,
                 big_steps: int = 32) -> dict:
    out = {}
    for family in ("dream", "llada"):
        out[family] = time_fill(_engine(family, "bench"), context, canvas, steps, repeats)
        r = out[family]
        print(f"{family:<8}{r['params_m']:>8.1f}M  window {r['window_tokens']}  exact {r['exact_ms_per_step']:.1f} "
              f"ms/step, fill {r['exact_fill_ms']:.0f} ms ({r['steps']} steps)")
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
