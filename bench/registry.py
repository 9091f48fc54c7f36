"""The table of benchmarks `python -m bench` lists and runs: every `python -m bench.X` entry point once, grouped by
what it measures, with one line each; the device scripts (bench/*.sh); and the helper modules (no command of their
own), each with the benchmark it serves. tests/bench/test_bench_layout.py holds it against the files in bench/.

A new benchmark adds one `Bench(...)` row to BENCHES (a new helper one `Helper(...)` row to HELPERS); the test's
failure message prints the row to add. `coming` marks a row whose file lands from another branch: it is hidden from
the listing until the file is there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

GROUPS = {
    "latency": "what a user waits for, through the real server",
    "quality": "what the fills and next edits are worth",
    "reliability": "hostile input, crashes, leaks",
    "engine": "the denoising engine on CPU, and the CPU suite (`make bench`)",
    "formats": "quantized and GGUF weights: bytes, error, kernels",
    "service": "editors sharing one engine service, and the openai (vLLM) backend",
    "device": "a CUDA device (each has a CPU dry run)",
}


@dataclass(frozen=True)
class Bench:
    """One command: `python -m bench.<name>` (or bench/<name> for a script ending in .sh)."""

    name: str
    group: str
    line: str
    coming: str = ""  # "issue N": the file lands from another branch

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"bench {self.name!r}: group {self.group!r} is not one of {', '.join(GROUPS)}")
        if not self.line or "\n" in self.line:
            raise ValueError(f"bench {self.name!r}: its line must be one non-empty line")

    @property
    def path(self) -> Path:
        return HERE / (self.name if self.name.endswith(".sh") else f"{self.name}.py")

    @property
    def command(self) -> str:
        return f"bench/{self.name}" if self.name.endswith(".sh") else f"python -m bench.{self.name}"


@dataclass(frozen=True)
class Helper:
    """A module with no command of its own, and the benchmarks it serves."""

    name: str
    serves: str

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.py"


BENCHES = [
    Bench("lsp_latency", "latency", "server overhead per keystroke, keystroke -> item, steps after a cancel"),
    Bench("quality", "quality", "infill exact match and edit similarity (stdlib holes, HumanEval), the gate"),
    Bench("context", "quality", "context from other files: recall of the definitions a hole needs, index cost"),
    Bench("next_edit", "quality", "next-edit suggestions on held-out edit tasks: exact, no-edit precision"),
    Bench("reliability", "reliability", "malformed input, random edits, races: unanswered, crashes, RSS growth"),
    Bench("run", "engine", "the CPU suite (`make bench`): sweeps, editor latency, memory -> bench/results/"),
    Bench("engine_speed", "engine", "the engine vs transformers' generate on one checkpoint: ms per step"),
    Bench("engine_sweep", "engine", "step time vs canvas and context, acceptance, prefix cache, cancel"),
    Bench("step_profile", "engine", "what a denoising step would cost a GPU: syncs, graph breaks, ops"),
    Bench("parity", "engine", "the engine vs transformers on tiny checkpoints: logits and tokens"),
    Bench("memory", "engine", "peak RSS per configuration, each in its own process"),
    Bench("plots", "engine", "PNG plots of a bench.run result"),
    Bench("quant", "formats", "int8 / int4 / fp8 weights: bytes, logit error, token agreement"),
    Bench("gguf", "formats", "GGUF: bytes per ggml type, Q4_K_M kernel error, load time, 4090 fit"),
    Bench("cpu_quant", "formats", "quantized CPU matmuls side by side with llama.cpp"),
    Bench("service", "service", "editors sharing one engine service: latency, throughput, a killed service"),
    Bench("service_loop", "service", "the service's /health while it processes the largest prompts"),
    Bench("vllm_standin", "service", "the openai backend against a vLLM stand-in: canvas tokens per fill"),
    Bench("gpu_suite", "device", "the engine suite on one CUDA device (26B-A4B shape, random weights)"),
    Bench("gpu_quant", "device", "decoder step time with int4 / int8 / fp8 / GGUF weights vs bf16"),
    Bench("gpu.sh", "device", "bench.gpu_suite in one call under 8 minutes -> bench/results/gpu"),
    Bench("gpu_gguf.sh", "device", "the GGUF path on one CUDA device: kernel, logits, decoder step"),
]

HELPERS = [
    Helper("registry", "python -m bench (this table)"),
    Helper("common", "every benchmark (model picker, child environment, machine, medians, last-line JSON)"),
    Helper("checkpoint", "bench.common, bench.engine_speed (the random checkpoint of the default model's shape)"),
    Helper("launch", "lsp_latency, context_overhead, next_edit, service, vllm_standin (server launcher, typing)"),
    Helper("context_overhead", "context, lsp_latency --context"),
    Helper("context_es", "context"),
    Helper("quality_context", "quality"),
    Helper("gate_replay", "quality"),
    Helper("next_edit_mine", "next_edit"),
    Helper("next_edit_patterns", "next_edit"),
    Helper("next_edit_tasks", "next_edit"),
    Helper("next_edit_score", "next_edit"),
    Helper("rawlsp", "reliability (and tests)"),
    Helper("malformed", "reliability"),
    Helper("editfuzz", "reliability"),
    Helper("reliability_docs", "reliability"),
    Helper("tally", "reliability"),
    Helper("report", "run, gpu_suite"),
    Helper("gpu_model", "gpu_suite"),
    Helper("parity_families", "parity"),
    Helper("parity_gguf", "parity"),
    Helper("cpu_quant_error", "cpu_quant (what the 8-bit few-row product adds to a format's own error)"),
    Helper("engine_speed_families", "engine_speed"),
]


def present(benches: list[Bench] = BENCHES) -> list[Bench]:
    """The rows whose file is in this checkout (a `coming` row's file may not have landed yet)."""
    return [b for b in benches if b.path.is_file()]


def find(name: str) -> Bench | None:
    """The present row called `name` (`bench.lsp_latency`, `lsp_latency`, `gpu.sh` and `bench/gpu.sh` all work)."""
    name = name.removeprefix("bench.").removeprefix("bench/").removesuffix(".py")
    return next((b for b in present() if b.name == name), None)
