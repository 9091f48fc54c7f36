"""How denoising steps run: eagerly, compiled by `torch.compile`, or replayed from CUDA graphs, one per bucket.

A canvas run steps with a noise source (`engine.denoising.denoise.NoiseSource`): the runner's `CounterNoise`, or
another one given to `start` (reference mode's `GeneratorNoise`). A source that is not `traceable` always runs eagerly.

A bucket is (canvas length, context capacity, stability threshold, acceptance rule, noise source): every shape a
step sees, and the source a captured graph bakes in. An eager step uses the context's exact size; a compiled or
captured one rounds the context up to a capacity (`capacity_for`) so that a handful of graphs serve every request,
and masks the unused slots.

Under CUDA graphs a bucket owns static tensors (the `DecodeKV` workspace and a `DenoiseState`) that the graph reads
and writes. A canvas run copies its context in when it starts; if another run used the bucket in between (two
interleaved `Engine.stream`s), the bucket saves the other run's state and reloads this one's before replaying.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from engine.denoising.denoise import CounterNoise, DenoiseState, NoiseSource, denoise_step
from engine.denoising.sampler import VocabPass
from engine.model.kv_cache import DecodeKV, KVCache
from engine.model.transformer import DiffusionGemmaText
from engine.seam import CancelFlag

# What the step loop yields after each step: (argmax canvas ids, tokens accepted, stopped, the argmax canvas on the
# device, each argmax token's probability at temperature 1 in units of 1/PROB_SCALE), all but the device canvas from
# one host read. Only a canvas's last step's probabilities are used: the caller scales those.
StepOut = tuple[list[int], int, bool, Callable[[], torch.Tensor], list[int]]


def capacity_for(context_tokens: int, compile: bool, graphs: bool) -> int | None:
    """The context capacity of a step's bucket: exact for a plain eager step (None); otherwise at least 256 and
    rounded up, to a power of two when compiling (each bucket is a compile), else to m * 2**k with m in 4..7 (a
    CUDA graph per bucket is cheap; padding stays under 25%, and padded slots still cost attention FLOPs)."""
    if not compile and not graphs:
        return None
    n = max(context_tokens, 256)
    if compile:
        return 1 << (n - 1).bit_length()
    k = max(0, (n - 1).bit_length() - 3)  # n <= 8 * 2**k
    return -(-n // (1 << k)) * (1 << k)


@dataclass(frozen=True)
class Bucket:
    canvas: int
    capacity: int | None
    stability: int
    one_per_step: bool
    noise: NoiseSource


@dataclass(frozen=True)
class Schedule:
    """The per-canvas sampler settings a run starts with."""

    key: int
    steps: int
    t_min: float
    t_max: float
    bound: float
    confidence: float
    seed: tuple[int, ...] | None = None  # the canvas's starting ids (C of them), or None: from noise
    level: float = 1.0  # the seed's corruption level (NoiseSource.start)


class CanvasRun:
    """One canvas being denoised. `step()` runs one denoising step and returns the host copy of the state's `out`
    tensor (argmax canvas, accepted count, stop flag, token probabilities): the step's one host sync. `graphed`:
    replayed from its bucket's CUDA graph."""

    def __init__(self, runner: StepRunner, bucket: Bucket, cache: KVCache, schedule: Schedule) -> None:
        self.runner, self.bucket, self.cache, self.schedule = runner, bucket, cache, schedule
        self.noise = bucket.noise
        self.graphed = runner.graphs and self.noise.traceable
        self.saved: DenoiseState | None = None  # graphs: this run's state while another run holds the bucket
        self.kv, self.state = runner.prepare(self)

    def step(self) -> list[int]:
        return self.runner.run(self).tolist()

    def argmax(self) -> torch.Tensor:
        """(1, C) argmax canvas of the last step, on the device."""
        return self.runner.out_of(self)[: self.bucket.canvas][None].clone()

    def close(self) -> None:
        """No more steps: a CUDA-graph bucket need not save this run's state for it."""
        self.runner.release(self)


class _Graph:
    """A bucket's static workspace, state and captured step (CUDA only)."""

    def __init__(self, kv: DecodeKV, state: DenoiseState) -> None:
        self.kv, self.state = kv, state
        self.graph: torch.cuda.CUDAGraph | None = None
        self.owner: CanvasRun | None = None


class StepRunner:
    """Runs `denoise_step` for an engine's model: eagerly or compiled (`torch.compile(fullgraph=True)`), and on
    CUDA optionally captured as one CUDA graph per bucket; `noise` is its own source (`CounterNoise`)."""

    def __init__(self, model: DiffusionGemmaText, vocab_pass: VocabPass, compile: bool = False,
                 graphs: bool = False) -> None:
        p = model.embed_tokens
        if graphs and p.device.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device")
        self.model, self.compile, self.graphs = model, compile, graphs
        self.noise = CounterNoise(vocab_pass)
        self.device, self.dtype = p.device, p.dtype
        self._graphs: dict[Bucket, _Graph] = {}
        self._pool = None
        # Compiling the decoder forward and leaving the vocabulary pass eager is faster on CPU than compiling the
        # whole step (Inductor's C++ for max-with-index, scans and searchsorted is slower than ATen's); the whole
        # step traces as one graph too (tests/engine/test_compile.py), which is what a CUDA graph captures.
        decode = torch.compile(model.decode_step, fullgraph=True, dynamic=False) if compile else None
        self._step: Callable = functools.partial(denoise_step, decode=decode)

    def start(self, cache: KVCache, canvas: int, stability: int, one_per_step: bool, schedule: Schedule,
              noise: NoiseSource | None = None) -> CanvasRun:
        """A run of one canvas against context `cache`, its random numbers from `noise` (default: the runner's)."""
        noise = noise or self.noise
        fast = noise.traceable
        capacity = capacity_for(cache.length, self.compile and fast, self.graphs and fast)
        return CanvasRun(self, Bucket(canvas, capacity, stability, one_per_step, noise), cache, schedule)

    def steps(self, cache: KVCache, canvas: int, stability: int, one_per_step: bool, schedule: Schedule,
              noise: NoiseSource, cancel: CancelFlag | None, lock: threading.RLock) -> Iterator[StepOut]:
        """The denoising loop of one canvas, whatever its noise source: yields a `StepOut` after each step until the
        step budget, the stopping rule or `cancel` (checked before each step) ends it. `lock` is held during each
        step (the run starts inside the first one), never across a yield."""
        run = None
        try:
            for _ in range(schedule.steps):
                if cancel is not None and cancel.cancelled:
                    return
                with lock:
                    if run is None:
                        run = self.start(cache, canvas, stability, one_per_step, schedule, noise)
                    host = run.step()
                stopped = bool(host[canvas + 1])
                yield host[:canvas], host[canvas], stopped, run.argmax, host[canvas + 2:]
                if stopped:
                    return
        finally:
            if run is not None:
                with lock:
                    run.close()

    def _new(self, bucket: Bucket, context_tokens: int) -> tuple[DecodeKV, DenoiseState]:
        cfg = self.model.cfg
        kv = DecodeKV.allocate(cfg, bucket.canvas, context_tokens, bucket.capacity, self.device, self.dtype)
        state = DenoiseState.allocate(bucket.canvas, cfg.hidden_size, bucket.stability, self.device, self.dtype)
        return kv, state

    def _load(self, run: CanvasRun, kv: DecodeKV, state: DenoiseState) -> None:
        m, s = self.model, run.schedule
        kv.fill(run.cache, m.rope_tables(run.cache.length, run.bucket.canvas, self.device, self.dtype))
        seed = None
        if s.seed is not None:  # an asynchronous copy: the host does not wait for the device's queue
            seed = torch.tensor([s.seed], dtype=torch.long).to(self.device, non_blocking=True)
        state.start(run.noise, s.key, m.cfg.vocab_size, s.steps, s.t_min, s.t_max, s.bound, s.confidence, seed,
                    s.level)

    def prepare(self, run: CanvasRun) -> tuple[DecodeKV, DenoiseState]:
        if not run.graphed:
            kv, state = self._new(run.bucket, run.cache.length)
            self._load(run, kv, state)
            return kv, state
        g = self._graphs.get(run.bucket)
        if g is None:
            g = self._graphs[run.bucket] = _Graph(*self._new(run.bucket, run.cache.length))
        self._take(g, run, fresh=True)
        if g.graph is None:
            self._capture(g, run)
        return g.kv, g.state

    def _take(self, g: _Graph, run: CanvasRun, fresh: bool) -> None:
        """Make `run` the owner of bucket `g`: save the previous owner's state, load this run's."""
        if g.owner is run:
            return
        if g.owner is not None:
            prev = g.owner
            prev.saved = prev.saved or DenoiseState.allocate(prev.bucket.canvas, self.model.cfg.hidden_size,
                                                             prev.bucket.stability, self.device, self.dtype)
            prev.saved.copy_from(g.state)
        self._load(run, g.kv, g.state)
        if not fresh and run.saved is not None:
            g.state.copy_from(run.saved)
        g.owner = run

    def _capture(self, g: _Graph, run: CanvasRun) -> None:
        """Warm up on a side stream (allocations, autotuning, compilation), capture one step, reset the state."""
        step = functools.partial(self._step, self.model, g.kv, g.state, run.noise, run.bucket.one_per_step)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        g.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g.graph, pool=self._pool):
            step()
        self._load(run, g.kv, g.state)  # warm-up and capture advanced the state

    def run(self, run: CanvasRun) -> torch.Tensor:
        if not run.graphed:
            step = self._step if run.noise.traceable else denoise_step  # eager: the reference's arithmetic
            step(self.model, run.kv, run.state, run.noise, run.bucket.one_per_step)
            return run.state.out
        g = self._graphs[run.bucket]
        self._take(g, run, fresh=False)
        assert g.graph is not None
        g.graph.replay()
        return g.state.out

    def release(self, run: CanvasRun) -> None:
        g = self._graphs.get(run.bucket) if run.graphed else None
        if g is not None and g.owner is run:
            run.saved = DenoiseState.allocate(run.bucket.canvas, self.model.cfg.hidden_size, run.bucket.stability,
                                              self.device, self.dtype)
            run.saved.copy_from(g.state)  # its last result stays readable (argmax)
            g.owner = None

    def out_of(self, run: CanvasRun) -> torch.Tensor:
        return self.state_of(run).out

    def state_of(self, run: CanvasRun) -> DenoiseState:
        """The state holding `run`'s last step (the bucket's, or the copy saved when another run took it)."""
        if not run.graphed:
            return run.state
        g = self._graphs[run.bucket]
        if g.owner is not run and run.saved is not None:
            return run.saved
        return g.state
