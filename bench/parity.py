"""Engine vs transformers' DiffusionGemmaForBlockDiffusion on tiny random checkpoints: logits and generated ids.

    python -m bench.parity [--cases 4]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run(cases: int) -> dict:
    from transformers import DiffusionGemmaForBlockDiffusion
    from transformers.cache_utils import DynamicCache

    from engine.engine import Engine
    from engine.model import KVCache
    from engine.testing import TINY_VARIANTS, build_tiny_checkpoint

    rows, worst, identical, total = [], 0.0, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for vi, variant in enumerate(TINY_VARIANTS):
            path = build_tiny_checkpoint(Path(tmp) / variant, variant, canvas_length=16, seed=vi)
            eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
            ref = DiffusionGemmaForBlockDiffusion.from_pretrained(path).eval()
            eos, pad = ref.config.text_config.eos_token_id, ref.config.text_config.pad_token_id
            g = torch.Generator().manual_seed(1000 + vi)
            for case in range(cases):
                n_ctx = 8 + 13 * case
                ctx = torch.randint(3, eng.vocab_size, (1, n_ctx), generator=g)
                canvas = torch.randint(0, eng.vocab_size, (1, 16), generator=g)
                sc = torch.randn(1, 16, eng.vocab_size, generator=g) * 4
                with torch.no_grad():
                    cache = DynamicCache(config=ref.config.get_text_config(decoder=True))
                    ref.model.encoder(input_ids=ctx, cache=cache)
                    want = ref(decoder_input_ids=canvas, cache=cache, self_conditioning_logits=sc).logits
                soft = eng.model.soft_embedding(torch.softmax(sc, dim=-1, dtype=torch.float32))
                got = eng.model.decode(canvas, eng.model.encode(ctx, KVCache()), soft)
                diff = (got - want).abs().max().item()
                torch.manual_seed(case)
                seq = ref.generate(ctx, max_new_tokens=32, max_denoising_steps=6).sequences[0, n_ctx:].tolist()
                want_ids = []
                for t in seq:
                    if t == eos:
                        break
                    if t != pad:
                        want_ids.append(t)
                got_ids = eng.generate_ids(ctx[0].tolist(), max_new_tokens=32, steps=6, seed=case,
                                           reference_compatible=True)
                same = got_ids == want_ids
                rows.append((variant, n_ctx, diff, len(want_ids), same))
                worst, identical, total = max(worst, diff), identical + same, total + 1
    print(f"{'config':<15}{'context':>8}{'max|dlogit|':>14}{'new ids':>9}{'identical':>11}")
    for variant, n_ctx, diff, n, same in rows:
        print(f"{variant:<15}{n_ctx:>8}{diff:>14.2e}{n:>9}{str(same):>11}")
    return {"configs": len(TINY_VARIANTS), "cases": total, "max_abs_logit_diff": worst, "tokens_identical": identical}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=4, help="prompts per config")
    args = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    from bench.common import emit

    emit(run(args.cases))


if __name__ == "__main__":
    main()
