"""Random-weight models built straight on the target device (no files): the DiffusionGemma 26B-A4B text shape for
GPU runs, a tiny shape for CPU dry runs; a transformers twin sharing the same tensors; the weight-streaming floor.

Shape of google/diffusiongemma-26B-A4B-it's text model (Gemma 4 26B-A4B backbone). Sources, read 2026-11-30: the
GGUF metadata of Ollama's `gemma4:26b-a4b-it` (block_count 30, embedding_length 2816, head_count 16, head_count_kv
8, key_length 512 / key_length_swa 256, sliding_window 1024, expert_count 128, expert_used_count 8,
expert_feed_forward_length 704, feed_forward_length 2112, final_logit_softcapping 30, rope bases 1e6 / 1e4) and
model pages listing 25 sliding + 5 global layers, vocabulary 262,144, a KV cache of ~210 KiB/token. The global
layers' KV-head count is not in those sources; 2 is inferred from the 210 KiB/token (25 sliding layers x 8 heads x
256 x 2 (K, V) x 2 B = 200 KiB, + 5 global layers x 2 heads x 512 x 2 B (K = V, stored once) = 10 KiB). With this
shape our model has 25.2B parameters, 3.8B active per token (see `param_counts`), matching the published figures.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from engine.config import CheckpointConfig, SamplerDefaults, TextConfig, parse_text_config
from engine.model.transformer import DiffusionGemmaText

GEMMA4_26B_A4B = dict(
    vocab_size=262_144, hidden_size=2816, intermediate_size=2112, num_hidden_layers=30, num_attention_heads=16,
    num_key_value_heads=8, head_dim=256, global_head_dim=512, num_global_key_value_heads=2, sliding_window=1024,
    num_experts=128, top_k_experts=8, moe_intermediate_size=704, max_position_embeddings=262_144,
    final_logit_softcapping=30.0,
)  # layer_types: the config default, every 6th layer full attention (25 sliding + 5 full)

# The same structure scaled down for CPU dry runs (seconds).
TINY = dict(
    vocab_size=4096, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1, sliding_window=64,
    num_experts=8, top_k_experts=2, moe_intermediate_size=32, max_position_embeddings=65_536,
)


def text_config(raw: dict) -> TextConfig:
    return parse_text_config(raw)


def param_counts(cfg: TextConfig) -> dict:
    """Total and per-token active parameters of our text model (tied embedding counted once)."""
    with torch.device("meta"):
        model = DiffusionGemmaText(cfg)
    total = sum(p.numel() for p in model.parameters())
    idle_experts = (cfg.num_experts - cfg.top_k_experts) * 3 * cfg.hidden_size * cfg.moe_intermediate_size
    active = total - cfg.num_hidden_layers * idle_experts
    return {"total_b": round(total / 1e9, 3), "active_b": round(active / 1e9, 3)}


def random_model(cfg: TextConfig, device: torch.device | str, dtype: torch.dtype = torch.bfloat16,
                 seed: int = 0) -> DiffusionGemmaText:
    """DiffusionGemmaText built on the meta device, then every tensor materialised on `device` with random values:
    matrices N(0, 1/fan_in) (activations keep unit scale through 30 layers), norm weights and scales 1 + N(0, 0.1),
    layer scalars 1. Nothing is allocated on the host."""
    device = torch.device(device)
    with torch.device("meta"):
        model = DiffusionGemmaText(cfg)
    # Cast on meta first: to_empty() in fp32 would allocate 4 bytes per parameter (101 GB for 26B) on the device.
    model = model.to(dtype).to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0, 0.1, generator=gen)
            else:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=gen)
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.fill_(1.0)
    return model.eval().requires_grad_(False)


# The prefix cache's share of an 80 GB card next to 50.5 GB of bf16 weights (a 32k context holds ~1.3 GB of KV).
PREFIX_CACHE_BYTES = 12 * 2**30


def make_engine(model: DiffusionGemmaText, canvas_length: int = 256, **kwargs):
    """An Engine around an in-memory model (no tokenizer: the id-based API only); kwargs go to Engine."""
    from engine.engine import Engine
    from engine.tokens import InfillFormat

    cfg = model.cfg
    p = next(model.parameters())
    fmt = InfillFormat(bos_id=cfg.bos_token_id, eos_id=cfg.eos_token_ids[0], pad_id=cfg.pad_token_id)
    config = CheckpointConfig(text=cfg, canvas_length=canvas_length, sampler=SamplerDefaults())
    kwargs = {"prefix_cache_size": 16, "prefix_cache_bytes": PREFIX_CACHE_BYTES, **kwargs}
    return Engine(model, config, None, fmt, p.device, p.dtype, Path("<random weights>"), **kwargs)


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Modules built inside keep their parameters on the meta device (buffers such as rotary frequencies stay real,
    so the model is complete once its parameters are assigned)."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None:
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def transformers_twin(model: DiffusionGemmaText, raw: dict, canvas_length: int = 256):
    """transformers' DiffusionGemmaForBlockDiffusion holding the very tensors of `model` (no copy), on its device.
    Vision-tower parameters (a tiny config; generate never runs them) are zero-filled."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from engine.model.transformer import map_name
    from engine.testing.tiny import TINY_VISION

    p0 = next(model.parameters())
    text = dict(raw, layer_types=list(model.cfg.layer_types))
    config = DiffusionGemmaConfig(text_config=text, vision_config=dict(TINY_VISION), canvas_length=canvas_length)
    with _parameters_on_meta():
        ref = DiffusionGemmaForBlockDiffusion(config).eval()
    ours = dict(model.state_dict(keep_vars=True))
    state, missing = {}, []
    for name, t in ref.state_dict(keep_vars=True).items():
        key = map_name(name)
        if key == "lm_head" and model.lm_head is None:
            key = "embed_tokens"
        if key in ours:
            if tuple(ours[key].shape) != tuple(t.shape):
                raise ValueError(f"{name}: transformers shape {tuple(t.shape)} != ours {tuple(ours[key].shape)}")
            state[name] = ours[key]
        elif key is None:
            state[name] = torch.zeros(t.shape, dtype=p0.dtype if t.is_floating_point() else t.dtype, device=p0.device)
        else:
            missing.append(name)
    if missing:
        raise ValueError(f"transformers tensors with no engine counterpart: {missing[:10]}")
    ref.load_state_dict(state, assign=True, strict=True)
    ref.to(p0.device)  # buffers built on the host (rotary frequencies); parameters are already there
    return ref.eval().requires_grad_(False)


def weight_stream_floor(model: nn.Module, repeats: int = 3) -> dict:
    """Time to read every weight once (a sum over each tensor): the floor for a step that touches all weights."""
    params = list(model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in params)
    cuda = params[0].device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times = []
    for i in range(repeats + 1):  # the first pass is a warm-up
        sync()
        t = time.perf_counter()
        acc = torch.zeros((), dtype=torch.float32, device=params[0].device)
        for p in params:
            acc += p.sum(dtype=torch.float32)
        sync()
        if i:
            times.append(time.perf_counter() - t)
    ms = sorted(times)[len(times) // 2] * 1e3
    return {"weight_gb": round(nbytes / 1e9, 3), "read_all_weights_ms": round(ms, 3),
            "effective_gb_per_s": round(nbytes / 1e9 / (ms / 1e3), 1)}
