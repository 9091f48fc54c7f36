"""GGUF rows of `python -m bench.parity`: a tiny checkpoint written as an F32 GGUF and as a Q8_0 GGUF (served packed,
weights=auto) against its safetensors twin (engine.testing.gguf_twin: the GGUF's tensors dequantized, laid out at
the GGUF's alignment), through the engine on the twin and transformers' DiffusionGemma on it: logits of the same
random cases, generated ids in reference-compatible mode, and a sweep over context lengths from one token up.

`save_pretrained_max_abs_logit_diff` (F32 only) is the engine on the GGUF against the engine on the checkpoint the
GGUF was written from (`save_pretrained`'s packed layout) over the sweep: the same weights bit for bit, apart only
where one-row products meet a weight at another address mod 16 (see engine.testing.gguf_twin)."""

from __future__ import annotations

from pathlib import Path

import torch

RULES = ("F32", "Q8_0")


def _decode(eng, ctx, canvas, sc) -> torch.Tensor:
    from engine.model.kv_cache import KVCache

    with torch.inference_mode():
        soft = eng.model.soft_embedding(torch.softmax(sc, dim=-1, dtype=torch.float32))
        return eng.model.decode(canvas, eng.model.encode(ctx, KVCache()), soft)


def run_gguf(tmp: Path, cases: int, lengths: range, sweep_steps: int) -> dict:
    """rule -> {cases, max_abs_logit_diff (vs transformers on the twin), engine_max_abs_logit_diff (vs the engine
    on the twin), tokens_identical, sweep_*, save_pretrained_max_abs_logit_diff, weights}; prints a table."""
    from transformers import DiffusionGemmaForBlockDiffusion

    from engine.engine import Engine
    from engine.formats.gguf_write import write_gguf
    from engine.testing.gguf_twin import gguf_twin
    from engine.testing.tiny import build_tiny_checkpoint, generated_ids, logit_diff

    src = build_tiny_checkpoint(tmp / "gguf_src", "mixed", canvas_length=16, seed=11)
    packed = Engine.from_pretrained(src, device="cpu", dtype="float32")
    out = {}
    print(f"\n{'gguf':<8}{'context':>8}{'vs transformers':>17}{'vs engine':>11}{'new ids':>9}{'identical':>11}")
    for ri, rule in enumerate(RULES):
        path = write_gguf(src, tmp / f"{rule}.gguf", rule)
        twin = gguf_twin(path, src, tmp / f"{rule}_twin")
        eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
        other = Engine.from_pretrained(twin, device="cpu", dtype="float32")
        ref = DiffusionGemmaForBlockDiffusion.from_pretrained(twin, dtype=torch.float32).eval()
        g, v = torch.Generator().manual_seed(3000 + ri), eng.vocab_size
        rows, sweep, layout = [], [], 0.0
        for case in range(cases):
            n_ctx = 8 + 13 * case
            ctx, canvas = torch.randint(3, v, (1, n_ctx), generator=g), torch.randint(0, v, (1, 16), generator=g)
            sc = torch.randn(1, 16, v, generator=g) * 4
            got = _decode(eng, ctx, canvas, sc)
            mine = (got - _decode(other, ctx, canvas, sc)).abs().max().item()
            diff = logit_diff(eng, ref, ctx, canvas, sc)
            ids = torch.randint(3, v, (n_ctx,), generator=g).tolist()
            want, new = generated_ids(eng, ref, ids, case, 2 * eng.config.canvas_length, 6)
            rows.append((n_ctx, diff, mine, len(want), new == want))
            print(f"{rule:<8}{n_ctx:>8}{diff:>17.2e}{mine:>11.2e}{len(want):>9}{str(new == want):>11}")
        for n_ctx in lengths:
            ctx, canvas = torch.randint(3, v, (1, n_ctx), generator=g), torch.randint(0, v, (1, 16), generator=g)
            sc = torch.randn(1, 16, v, generator=g) * 4
            if rule == "F32":  # bit-equal weights: what the file layout alone does
                layout = max(layout, (_decode(eng, ctx, canvas, sc) - _decode(packed, ctx, canvas, sc)).abs().max()
                             .item())
            diff = logit_diff(eng, ref, ctx, canvas, sc)
            ids = torch.randint(3, v, (n_ctx,), generator=g).tolist()
            want, new = generated_ids(eng, ref, ids, n_ctx, eng.config.canvas_length, sweep_steps)
            sweep.append((n_ctx, diff, new == want))
        print(f"{rule:<8}sweep {lengths.start}..{lengths.stop - 1}: max|dlogit| "
              f"{max(r[1] for r in sweep):.2e}, identical {sum(r[2] for r in sweep)}/{len(sweep)}"
              + (f"; against the save_pretrained checkpoint: {layout:.2e}" if rule == "F32" else ""))
        out[rule] = {"weights": eng.weights, "cases": len(rows), "max_abs_logit_diff": max(r[1] for r in rows),
                     "engine_max_abs_logit_diff": max(r[2] for r in rows),
                     "tokens_identical": sum(r[4] for r in rows), "sweep_cases": len(sweep),
                     "sweep_max_abs_logit_diff": max(r[1] for r in sweep),
                     "sweep_tokens_identical": sum(r[2] for r in sweep),
                     "save_pretrained_max_abs_logit_diff": layout if rule == "F32" else None}
    return out
