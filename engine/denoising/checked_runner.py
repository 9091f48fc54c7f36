"""The step runner an engine serves with, built only from pieces that passed their self-check at load.

Two stages (engine.kernels.selfcheck runs each): first the kernel pieces (engine.kernels.table: the Triton
vocabulary pass, the quantized matmuls of the formats loaded), whose survivors are installed; then the step pieces
defined here, which run one denoising step of the loaded model on a short context against an eager runner:
"compile" (`torch.compile` of the decoder step, when asked for on an accelerator) and "cuda_graphs" (capture and
replay of one bucket, on CUDA). A piece that fails leaves its fast path off: the runner is built without it. On a
CPU a compiled step serves unchecked, as before: there it is a developer option (the server never asks for it),
and checking it would cost an Inductor compile (minutes on a small machine) at every load.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from engine.denoising import sampler as S
from engine.denoising.runner import Schedule, StepRunner
from engine.kernels import selfcheck
from engine.kernels.table import KERNEL, STEP, Piece, Target, install, kernel_pieces, mismatch
from engine.model.kv_cache import KVCache

Table = Callable[[Target], Sequence[Piece]]  # the kernel table for a target (tests give their own)
CONTEXT_TOKENS = 16
STEP_TOLERANCE = 0.25
SCHEDULE = Schedule(key=7, steps=8, t_min=0.4, t_max=0.8, bound=0.5, confidence=0.005)


def step_inputs(t: Target) -> tuple[KVCache, int]:
    """A short context's KV cache (ids 1..16) and the canvas length to step."""
    ids = torch.arange(1, CONTEXT_TOKENS + 1, device=t.device)[None] % t.model.cfg.vocab_size
    return t.model.encode(ids, KVCache(), CONTEXT_TOKENS), t.canvas


def one_step(runner: StepRunner, cache: KVCache, canvas: int) -> torch.Tensor:
    """The argmax canvas (C,) after one denoising step of a fresh run from noise."""
    run = runner.start(cache, canvas, 1, False, SCHEDULE)
    try:
        return torch.tensor(run.step()[:canvas])
    finally:
        run.close()


def eager_step(t: Target) -> Callable[[KVCache, int], torch.Tensor]:
    return lambda cache, canvas: one_step(StepRunner(t.model, t.vocab), cache, canvas)


def step_pieces(t: Target) -> list[Piece]:
    """"compile" (with graphs off) and "cuda_graphs" (with the step compiled when that passed): one step each against
    the eager runner, the canvas ids compared. A 25% tolerance: a compiled or captured step rounds differently (a
    bucket pads the context, Inductor fuses), and on a meaningless 16-token context a bf16 model has near-ties that
    may flip (one position is 1/C of the canvas); a broken capture or compile gets most of the canvas wrong."""
    def compiled(cache: KVCache, canvas: int) -> torch.Tensor:
        return one_step(StepRunner(t.model, t.vocab, compile=True), cache, canvas)

    def graphed(cache: KVCache, canvas: int) -> torch.Tensor:
        return one_step(StepRunner(t.model, t.vocab, compile=t.compile, graphs=True), cache, canvas)

    def accel_compile(t: Target) -> bool:
        return t.compile and t.device.type != "cpu"

    tol = STEP_TOLERANCE
    return [Piece("compile", compiled, eager_step(t), tol, accel_compile, step_inputs, mismatch, STEP, timeout_s=600.0),
            Piece("cuda_graphs", graphed, eager_step(t), tol, lambda t: t.graphs, step_inputs, mismatch, STEP)]


def default_table(t: Target) -> list[Piece]:
    return [*kernel_pieces(t), *step_pieces(t)]


def check_kernels(target: Target, table: Table = default_table, report: selfcheck.GpuReport | None = None
                  ) -> tuple[S.VocabPass, selfcheck.GpuReport]:
    """The kernel stage alone: check the kernel pieces, install the matmul launchers that passed into the model's
    `QuantWeight`s; returns the vocabulary pass to serve with (the Triton one only if it passed) and the report.
    (bench.gpu_quant runs this on the models it builds.)"""
    report = report or selfcheck.GpuReport(str(target.device))
    kernels = [p for p in table(target) if p.stage == KERNEL]
    selfcheck.run(kernels, target, report)
    ok = {p.name: p for p in kernels if report.passed(p.name)}
    install(target.model, {p.meta["fmt"]: p.fast for p in ok.values() if "fmt" in p.meta})
    return (ok["vocab_pass"].fast if "vocab_pass" in ok else S.vocab_pass_torch), report


def build(target: Target, table: Table = default_table) -> tuple[StepRunner, selfcheck.GpuReport]:
    """Check the kernel pieces, install those that passed, check the step pieces with them, and return the runner
    built from what passed, with the report. A step mode whose piece failed is off; one no piece applies to (a
    compiled step on a CPU) serves as asked."""
    vocab, report = check_kernels(target, table)
    target = dataclasses.replace(target, vocab=vocab)
    # the step pieces run with the kernels as they will serve, each rebuilt after the one before (so "cuda_graphs"
    # captures the compiled step only if "compile" passed)
    for i in range(sum(p.stage == STEP for p in table(target))):
        selfcheck.run([[p for p in table(target) if p.stage == STEP][i]], target, report)
        target = dataclasses.replace(target, compile=target.compile and not report.fell_back("compile"))
    graphs = target.graphs and not report.fell_back("cuda_graphs")
    return StepRunner(target.model, vocab, compile=target.compile, graphs=graphs), report
