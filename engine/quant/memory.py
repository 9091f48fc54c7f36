"""Weight memory from a config's shape alone (no allocation): bytes per format, the device's free memory, the room
left for the KV cache, the fit check run before loading, and the report `dg-lsp --check` prints.

The 26B-A4B text shape is `GEMMA4_26B_A4B` (the same figures as bench/gpu_model.py, where their sources are
cited): 30 layers (25 sliding, 5 full), hidden 2816, 16 heads, 8 KV heads of 256 (full layers 2 of 512, K = V),
dense MLP 2112, 128 experts top-8 of 704, vocabulary 262,144, sliding window 1,024: 25.2B total, 3.8B active.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from engine.config import TextConfig, parse_text_config
from engine.model.transformer import DiffusionGemmaText
from engine.quant.formats import FORMATS, INT4_GROUP, INT4_SYMMETRIC, quantized_nbytes
from engine.quant.modules import is_target

GB = 1e9
GEMMA4_26B_A4B = dict(
    vocab_size=262_144, hidden_size=2816, intermediate_size=2112, num_hidden_layers=30, num_attention_heads=16,
    num_key_value_heads=8, head_dim=256, global_head_dim=512, num_global_key_value_heads=2, sliding_window=1024,
    num_experts=128, top_k_experts=8, moe_intermediate_size=704, max_position_embeddings=262_144,
    final_logit_softcapping=30.0,
)
# Widest first: "auto" takes the first that fits. fp8 and int8 are equally wide; int8 (per-channel, 127 levels) is
# the more accurate of the two for weights, so a bf16 checkpoint goes to int8; fp8 is kept when the checkpoint is fp8.
ORDER = ("bf16", "int8", "int4")
DEFAULT_CONTEXT_TOKENS = 8192


def gemma4_26b_a4b() -> TextConfig:
    return parse_text_config(GEMMA4_26B_A4B)


def weight_shapes(cfg: TextConfig) -> dict[str, tuple[int, ...]]:
    """Our state-dict key -> shape, from the model built on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = DiffusionGemmaText(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def param_counts(cfg: TextConfig) -> dict[str, int]:
    """Total parameters and those one token touches (top-k of the experts), tied embedding counted once."""
    shapes = weight_shapes(cfg)
    total = sum(_numel(s) for s in shapes.values())
    experts = sum(_numel(s) for k, s in shapes.items() if ".moe." in k and len(s) == 3)
    return {"total": total, "active": total - experts + experts * cfg.top_k_experts // cfg.num_experts}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def weight_bytes(cfg: TextConfig, fmt: str, compute_bytes: int = 2, *, symmetric: bool = INT4_SYMMETRIC,
                 group_size: int = INT4_GROUP) -> int:
    """All weight bytes of the model in `fmt`: targets quantized (scales and zero points included), every other
    tensor (embedding, norms, router, scalars) in the compute dtype."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown weight format {fmt!r}; expected one of {FORMATS}")
    total = 0
    for key, shape in weight_shapes(cfg).items():
        quant = fmt != "bf16" and is_target(key)
        total += quantized_nbytes(shape, fmt if quant else "bf16", compute_bytes, symmetric=symmetric,
                                  group_size=group_size)
    return total


def bytes_by_format(cfg: TextConfig, compute_bytes: int = 2) -> dict[str, int]:
    return {fmt: weight_bytes(cfg, fmt, compute_bytes) for fmt in FORMATS}


def kv_bytes_per_token(cfg: TextConfig, compute_bytes: int = 2) -> int:
    """K and V of one context token over all layers (our cache stores both, also where K = V before the norm)."""
    return sum(2 * spec.num_kv_heads * spec.head_dim * compute_bytes for spec in cfg.layers)


def overhead_bytes(device: torch.device) -> int:
    """Memory outside torch's tensors: 1 GB for the CUDA context and the caching allocator's slack; 0 on the CPU."""
    return int(1 * GB) if device.type == "cuda" else 0


def reserve_bytes(cfg: TextConfig, compute_bytes: int = 2, context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                  canvas: int = 256, overhead: int = int(1 * GB)) -> int:
    """Memory a fill needs beside the weights: the KV cache of `context_tokens`, four fp32 (canvas, vocab) tensors of
    the vocabulary side (logits, processed, probabilities, one temporary), the canvas' activations, and `overhead`
    (see overhead_bytes)."""
    vocab_side = 4 * canvas * cfg.vocab_size * 4
    acts = 16 * canvas * cfg.top_k_experts * max(cfg.hidden_size, 2 * cfg.moe_intermediate_size) * compute_bytes
    return kv_bytes_per_token(cfg, compute_bytes) * context_tokens + vocab_side + acts + overhead


def free_bytes(device: torch.device) -> int:
    """Free memory of the device: CUDA's free memory, or the host's MemAvailable for the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


class FitError(MemoryError):
    """The weights (in the requested format) and the fill's working memory do not fit the device."""


@dataclass(frozen=True)
class Fit:
    fmt: str
    weights: int
    reserve: int
    free: int

    @property
    def fits(self) -> bool:
        return self.weights + self.reserve <= self.free


def check_fit(cfg: TextConfig, fmt: str, free: int, compute_bytes: int = 2, own: str | None = None,
              context_tokens: int = DEFAULT_CONTEXT_TOKENS, overhead: int = int(1 * GB)) -> Fit:
    """Raise FitError naming the widest format that would fit when `fmt` does not; `own` is the checkpoint's own
    quantized format (kept by "auto" and listed as an alternative)."""
    reserve = reserve_bytes(cfg, compute_bytes, context_tokens, overhead=overhead)
    fit = Fit(fmt, weight_bytes(cfg, fmt, compute_bytes), reserve, free)
    if fit.fits:
        return fit
    alts = [f for f in _candidates(own) if weight_bytes(cfg, f, compute_bytes) + reserve <= free]
    head = (f"needs {fit.weights / GB:.1f} GB in {fmt} (+{reserve / GB:.1f} GB for {kv_words(context_tokens)} and the "
            f"fill), the device has {free / GB:.1f} GB free")
    if alts:
        best = alts[0]
        raise FitError(f"{head}: try weights={best} ({weight_bytes(cfg, best, compute_bytes) / GB:.1f} GB)")
    smallest = weight_bytes(cfg, "int4", compute_bytes)
    raise FitError(f"{head}; even weights=int4 ({smallest / GB:.1f} GB) does not fit: use a larger device or a "
                   "shorter context")


def kv_words(context_tokens: int) -> str:
    """"a KV cache of 8k context tokens": how the fit messages name the reserve's KV part."""
    n = f"{context_tokens // 1024}k" if context_tokens % 1024 == 0 else str(context_tokens)
    return f"a KV cache of {n} context tokens"


def _candidates(own: str | None) -> list[str]:
    return ([own] if own else []) + [f for f in ORDER if f != own]


def choose(cfg: TextConfig, weights: str, free: int, compute_bytes: int = 2, own: str | None = None,
           context_tokens: int = DEFAULT_CONTEXT_TOKENS, overhead: int = int(1 * GB)) -> Fit:
    """Resolve the `weights` setting: "auto" keeps the checkpoint's own format (`own`, e.g. fp8) when it fits, else
    the widest of bf16 > int8 > int4 that fits with room for the KV cache; an explicit format is checked as is."""
    if weights != "auto":
        if weights not in FORMATS:
            raise ValueError(f"weights must be auto or one of {FORMATS}; got {weights!r}")
        return check_fit(cfg, weights, free, compute_bytes, own, context_tokens, overhead)
    reserve = reserve_bytes(cfg, compute_bytes, context_tokens, overhead=overhead)
    for fmt in _candidates(own):
        fit = Fit(fmt, weight_bytes(cfg, fmt, compute_bytes), reserve, free)
        if fit.fits:
            return fit
    return check_fit(cfg, "int4", free, compute_bytes, own, context_tokens, overhead)


def report(config: TextConfig, device: torch.device | str = "cpu", compute_bytes: int = 2,
           context_tokens: int = DEFAULT_CONTEXT_TOKENS) -> dict:
    """What `dg-lsp --check` prints about memory: weight bytes per format, the device's free memory, the room a fill
    needs, which formats fit and what "auto" would pick."""
    device = torch.device(device)
    free = free_bytes(device)
    per = bytes_by_format(config, compute_bytes)
    reserve = reserve_bytes(config, compute_bytes, context_tokens, overhead=overhead_bytes(device))
    auto = next((f for f in ORDER if per[f] + reserve <= free), None)
    lines = [f"weights {f}: {b / GB:.2f} GB{'' if b + reserve <= free else ' (does not fit)'}" for f, b in per.items()]
    lines.append(f"device {device}: {free / GB:.1f} GB free; a fill needs {reserve / GB:.2f} GB more "
                 f"({context_tokens} context tokens); weights=auto -> {auto or 'nothing fits'}")
    return {"bytes": per, "free": free, "reserve": reserve, "fits": {f: b + reserve <= free for f, b in per.items()},
            "auto": auto, "lines": lines}
