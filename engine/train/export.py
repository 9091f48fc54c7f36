"""Export a training run's checkpoint as a transformers-format model directory (the shipped default model)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_model

from engine.train.train import TrainConfig, build_model

# Sampler settings written to generation_config.json (the bench tunes them; `--generation` overrides).
DEFAULT_GENERATION = {
    "max_denoising_steps": 12,
    "entropy_bound": 0.5,
    "t_min": 0.05,
    "t_max": 0.8,
    "stability_threshold": 2,
    "confidence_threshold": 0.05,
}
# tokenizer_config.json: transformers' AutoTokenizer (and vLLM, which uses it) reads the folder with the fast tokenizer
# class over tokenizer.json as written. Without it they pick the config's model type's class (Gemma), which fails on
# the missing `<unk>` or decodes byte-level spaces and newlines as `Ġ`/`Ċ`. The special tokens are tokenizer.json's.
TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
                    "pad_token": "<pad>", "unk_token": None, "add_bos_token": False, "add_eos_token": False,
                    "clean_up_tokenization_spaces": False, "model_max_length": 4096, "padding_side": "left"}
# Canvas length the server should pick per hole kind when it does not know the hole's size.
CANVAS_BY_KIND = {"rest_of_line": 16, "statement": 32, "block_body": 64, "bracket": 16, "random_span": 16}


def generation_config(gen: dict, fmt_ids: dict):
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        DiffusionGemmaGenerationConfig,
        EntropyBoundSamplerConfig,
    )

    return DiffusionGemmaGenerationConfig(
        max_denoising_steps=int(gen["max_denoising_steps"]),
        sampler_config=EntropyBoundSamplerConfig(entropy_bound=float(gen["entropy_bound"])),
        t_min=float(gen["t_min"]),
        t_max=float(gen["t_max"]),
        stability_threshold=int(gen["stability_threshold"]),
        confidence_threshold=float(gen["confidence_threshold"]),
        **fmt_ids,
    )


def export(
    run_dir: Path, out: Path, dtype: str = "float32", generation: dict | None = None, notes: dict | None = None
) -> Path:
    cfg = TrainConfig.from_json(json.loads((Path(run_dir) / "config.json").read_text()))
    state = json.loads((Path(run_dir) / "ckpt" / "state.json").read_text())
    cfg = TrainConfig.from_json(dict(cfg.to_json(), device="cpu"))
    model = build_model(cfg)
    load_model(model, str(Path(run_dir) / "ckpt" / "model.safetensors"), device="cpu")
    model.config.canvas_length = min(cfg.data.canvas_lengths)
    model = model.to(getattr(torch, dtype)).eval()
    out = Path(out)
    if out.exists():
        for f in out.iterdir():
            if f.is_file():
                f.unlink()
    out.mkdir(parents=True, exist_ok=True)
    ids = {"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}
    model.generation_config = generation_config(dict(DEFAULT_GENERATION, **(generation or {})), ids)
    model.save_pretrained(out)
    shutil.copy(Path(cfg.tokenizer_dir) / "tokenizer.json", out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2) + "\n")
    infill = {
        "layout": "suffix_first",
        "canvas_lengths": list(cfg.data.canvas_lengths),
        # Budgets the model was trained with: contexts longer than this were never seen (cut at line boundaries).
        "max_context_tokens": cfg.data.context_tokens,
        "max_suffix_tokens": cfg.data.suffix_tokens,
        "canvas_by_hole_kind": CANVAS_BY_KIND,
        "language": "python",
        "training": {
            "steps": state["step"],
            "tokens": state["tokens"],
            "minutes": round(state["elapsed_s"] / 60, 1),
            "corpus": "CPython standard library (manifest in engine/train), 1 file in 20 held out",
            **(notes or {}),
        },
    }
    (out / "infill.json").write_text(json.dumps(infill, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "default_model")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--generation", default="{}", help="JSON overrides of the sampler settings")
    args = ap.parse_args(argv)
    out = export(args.run_dir, args.out, args.dtype, json.loads(args.generation))
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"exported to {out} ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
