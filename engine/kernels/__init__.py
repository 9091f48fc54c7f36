"""Fused kernels for the engine's hot paths, each with an eager oracle in `reference`: vocab_pass (the sampler's
pass over the vocabulary), moe_quant (grouped MoE GEMM over int8/int4/fp8 experts), gguf_moe (the same over
ggml-packed blocks). table holds them as pieces beside their references (the kernel table), selfcheck runs the
pieces that apply at load and keeps those that pass."""

from __future__ import annotations

import torch

from engine.kernels.reference import vocab_pass_reference
from engine.kernels.vocab_pass import interpreting, triton, vocab_pass

__all__ = ["available", "vocab_pass", "vocab_pass_reference"]


def available() -> bool:
    """True when `vocab_pass` can run: Triton is installed, and there is a CUDA device or the interpreter."""
    return triton is not None and (torch.cuda.is_available() or interpreting())
