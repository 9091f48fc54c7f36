"""The kernel table: every GPU-only piece the engine may serve with, each beside its eager reference.

A `Piece` is (name, fast, reference, tolerance, applies-when, inputs): `inputs(target)` builds small inputs of the
loaded model's shapes, `reference(*inputs)` and `fast(*inputs)` compute the same thing, and `error(fast, reference)`
must stay within `tolerance`. `engine.kernels.selfcheck` runs the pieces that apply at load and keeps only those that
pass; a piece's `fast` is then exactly what the product calls (the vocabulary pass the step runner gets, the launcher
a `QuantWeight` dispatches to), so a test that puts a double into the table exercises the product path around it.

Kernel pieces (this module): "vocab_pass" (engine.kernels.vocab_pass, applies when the plan samples with Triton),
"moe_quant:<fmt>" (engine.kernels.moe_quant, one per int8 / int4 / fp8 format the loaded weights use) and
"gguf_moe:<type>" (engine.kernels.gguf_moe, one per ggml block type loaded); these apply on CUDA with Triton.
On a CPU they do not apply: Triton there is its interpreter, a test harness, not a product path. The step pieces
("compile", "cuda_graphs") are in engine.denoising.checked_runner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.denoising import sampler as S
from engine.kernels.reference import moe_quant_reference, vocab_pass_reference
from engine.model.transformer import DiffusionGemmaText
from engine.quant.formats import QuantParts
from engine.quant.modules import QuantWeight

Launcher = Callable[[torch.Tensor, QuantParts, torch.Tensor], torch.Tensor]  # (x, parts, offsets) -> (S, N)
KERNEL, STEP = "kernel", "step"  # a piece's stage: kernels are checked (and installed) before the step


@dataclass(frozen=True)
class Target:
    """What a self-check knows of the loaded model: where it runs and what the plan would use. `vocab_pass`: the
    sampler backend the plan picked ("triton" | "torch"); `graphs`, `compile`: the step modes asked for; `canvas`:
    the canvas length the step pieces run (the smallest the prompt format serves); `vocab`: the vocabulary pass that
    survived the kernel stage (the step pieces run with it)."""

    model: DiffusionGemmaText
    device: torch.device
    dtype: torch.dtype
    vocab_pass: str = "torch"
    graphs: bool = False
    compile: bool = False
    canvas: int = 32
    vocab: S.VocabPass = S.vocab_pass_torch


@dataclass(frozen=True)
class Piece:
    """One GPU-only piece and its check. `reference` runs before `fast` (a fast path may consume its inputs)."""

    name: str
    fast: Callable[..., Any]
    reference: Callable[..., Any]
    tolerance: float
    applies: Callable[[Target], bool]
    inputs: Callable[[Target], Sequence[Any]]
    error: Callable[[Any, Any], float]
    stage: str = KERNEL
    timeout_s: float = 60.0  # a first Triton compile takes seconds; a piece still running after this fails
    meta: dict[str, str] = field(default_factory=dict, compare=False)  # e.g. {"fmt": "int8"}: what it serves


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want|, both in fp32 on the CPU; inf when `got` is not finite or misshapen."""
    got, want = got.detach().float().cpu(), want.detach().float().cpu()
    if got.shape != want.shape or not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30)) if want.numel() else 0.0


def mismatch(got: torch.Tensor, want: torch.Tensor) -> float:
    """Fraction of positions where two integer tensors differ (1.0 when their shapes do)."""
    got, want = got.detach().cpu(), want.detach().cpu()
    return 1.0 if got.shape != want.shape else float((got != want).float().mean()) if want.numel() else 0.0


def _tolerance(dtype: torch.dtype) -> float:
    # the kernels' dot products run in the activation dtype; the oracles in fp32
    return 1e-3 if dtype == torch.float32 else 3e-2


# -- the vocabulary pass ---------------------------------------------------------------------------------------------
def vocab_inputs(t: Target) -> tuple[torch.Tensor, torch.Tensor, float | None, torch.Tensor]:
    """16 rows of random logits over the model's vocabulary, per-row temperatures and seeds, on the device."""
    g = torch.Generator().manual_seed(0)
    rows, vocab = 16, t.model.cfg.vocab_size
    logits = (4 * torch.randn(rows, vocab, generator=g)).to(t.device, t.dtype)
    inv_t = torch.linspace(1.0, 2.5, rows).to(t.device)
    seeds = (torch.arange(rows, dtype=torch.int64) * 7919 + 1).to(t.device)
    return logits, inv_t, t.model.cfg.final_logit_softcapping, seeds


def vocab_reference(logits: torch.Tensor, inv_t: torch.Tensor, softcap: float | None,
                    seeds: torch.Tensor) -> S.VocabOut:
    return S.VocabOut(*vocab_pass_reference(logits.float(), inv_t, softcap, seeds))


def vocab_error(got: S.VocabOut, want: S.VocabOut) -> float:
    """The worst of: entropy and probabilities (relative), argmax and sample (fraction that differ)."""
    return max(rel_err(got.entropy, want.entropy), rel_err(got.probs, want.probs),
               mismatch(got.argmax, want.argmax), mismatch(got.sample, want.sample))


def vocab_piece(t: Target) -> Piece:
    return Piece("vocab_pass", S.vocab_pass_triton, vocab_reference, 1e-2, lambda t: t.vocab_pass == "triton",
                 vocab_inputs, vocab_error)


# -- quantized matmuls -------------------------------------------------------------------------------------------------
def sample_parts(p: QuantParts, experts: int = 4, rows: int = 64) -> QuantParts:
    """The first `experts` experts and `rows` output rows of a loaded weight (a 2D one as one expert): its real bytes,
    shapes and strides along K."""
    if len(p.shape) == 2:
        p = QuantParts(p.fmt, (1, *p.shape), p.qweight[None], p.scale[None],
                       p.zero[None] if p.zero is not None else None, p.group_size, p.act_dynamic)
    e, n = min(p.shape[0], experts), min(p.shape[1], rows)

    def cut(x: torch.Tensor | None) -> torch.Tensor | None:
        return x[:e, :n].contiguous() if x is not None and x.dim() == 3 else x

    q, s = cut(p.qweight), cut(p.scale)
    assert q is not None and s is not None
    return QuantParts(p.fmt, (e, n, p.shape[2]), q, s, cut(p.zero), p.group_size, p.act_dynamic)


def loaded_formats(model: torch.nn.Module) -> dict[str, QuantParts]:
    """Each quantized format the model holds -> one of its weights (an expert stack when there is one)."""
    out: dict[str, QuantParts] = {}
    for m in model.modules():
        if isinstance(m, QuantWeight) and (m.fmt not in out or len(out[m.fmt].shape) < len(m.shape)):
            out[m.fmt] = m.parts
    return out


def quant_inputs(fmt: str) -> Callable[[Target], tuple[torch.Tensor, QuantParts, torch.Tensor]]:
    def inputs(t: Target) -> tuple[torch.Tensor, QuantParts, torch.Tensor]:
        p = sample_parts(loaded_formats(t.model)[fmt])
        counts = torch.tensor([5, 0, 17, 3][: p.shape[0]] if p.shape[0] > 1 else [11])
        x = torch.randn(int(counts.sum()), p.shape[2], generator=torch.Generator().manual_seed(1))
        return x.to(t.device, t.dtype), p, torch.cumsum(counts, 0).to(t.device, torch.int32)
    return inputs


def quant_reference(x: torch.Tensor, p: QuantParts, offsets: torch.Tensor) -> torch.Tensor:
    """The eager oracle of either launcher, on the CPU in fp32."""
    x, p, offsets = x.float().cpu(), p.to("cpu"), offsets.cpu()
    if p.fmt.startswith("gguf:"):
        from engine.kernels.gguf_moe import gguf_moe_reference

        return gguf_moe_reference(x, p, offsets)
    return moe_quant_reference(x, p.qweight, p.scale, p.zero, p.fmt, offsets, p.group_size)


def _on_cuda_with_triton(t: Target) -> bool:
    from engine.kernels import moe_quant

    return t.device.type == "cuda" and moe_quant.triton is not None


def quant_piece(fmt: str, dtype: torch.dtype) -> Piece:
    """"moe_quant:<fmt>" or "gguf_moe:<type>": the launcher `QuantWeight`s of that format dispatch to."""
    if fmt.startswith("gguf:"):
        from engine.kernels.gguf_moe import gguf_moe_linear

        name, fast = f"gguf_moe:{fmt.removeprefix('gguf:')}", gguf_moe_linear
    else:
        from engine.kernels.moe_quant import moe_quant_linear

        name, fast = f"moe_quant:{fmt}", moe_quant_linear
    return Piece(name, fast, quant_reference, _tolerance(dtype), _on_cuda_with_triton, quant_inputs(fmt), rel_err,
                 meta={"fmt": fmt})


def kernel_pieces(t: Target) -> list[Piece]:
    """The kernel table for a loaded model: the vocabulary pass and one matmul piece per quantized format it holds."""
    return [vocab_piece(t), *(quant_piece(fmt, t.dtype) for fmt in sorted(loaded_formats(t.model)))]


def install(model: torch.nn.Module, launchers: dict[str, Launcher]) -> None:
    """Point every `QuantWeight` at the launcher of its format (None: its eager path, dequantize then matmul)."""
    for m in model.modules():
        if isinstance(m, QuantWeight):
            m.kernel = launchers.get(m.fmt)
