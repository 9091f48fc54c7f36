"""Every runnable benchmark's quick mode, each in its own process, as a user types it: it must run to the end and
print, as its last line, the JSON the README and the suite read, with its keys. A benchmark that rots (issue 21:
`bench.service` crashed for weeks after a shared client changed) fails here. Not timing tests (STYLE rule 12): the
figures are not checked, only that they are there.

Modules with no `__main__` block (bench/registry.py's HELPERS: common, launch, checkpoint, rawlsp, ...) are libraries
of the ones below and run inside them; bench/__main__.py is the list (test_bench_layout). `run` and `gpu_suite` run in
test_bench_smoke, which also reads the files they write.
One test per module, so pytest-xdist spreads them over its workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# module -> (arguments after the module name; "{tmp}" is the test's temporary folder, keys its last line must have:
# "a.b" is key b of the object at key a)
QUICK: dict[str, tuple[list[str], set[str]]] = {
    "cpu_quant": (["--quick"], {"vs_llamacpp", "rows", "before_ms", "logit_rel_err", "matmul_error", "memory",
                                "machine"}),
    "engine_speed": (["--quick"], {"speedup_vs_transformers", "engine_ms_per_step", "transformers_ms_per_step",
                                   "engine_reference_mode_ms_per_step", "params_m", "machine",
                                   "families.dream.exact_ms_per_step", "families.llada.exact_ms_per_step"}),
    "engine_sweep": (["--quick"], {"model", "canvas_sweep", "context_sweep", "acceptance", "prefix_cache", "cancel",
                                   "vs_transformers", "machine"}),
    "gpu_quant": (["--quick"], {"shape", "canvas", "context", "formats", "machine"}),
    "lsp_latency": (["--quick"], {"server_overhead_ms_p95", "e2e_ms_p50", "e2e_ms_p95", "steps_after_cancel_max",
                                  "typed_ahead_ms_p50", "stages_ms", "targets_met"}),
    "next_edit": (["--quick"], {"tasks", "exact", "no_edit_precision", "reversals", "syntax_breaks", "shown",
                                "p50_ms", "p95_ms", "seeded_vs_noise"}),
    "memory": (["--quick"], {"model", "memory", "machine"}),
    "parity": (["--quick"], {"cases", "max_abs_logit_diff", "tokens_identical", "families.dream.tokens_identical",
                             "families.llada.max_abs_logit_diff", "gguf"}),
    # plots reads a result the suite wrote: the committed one, drawn into the temporary folder
    "plots": ([str(ROOT / "bench" / "results" / "2026-11-30-vm.json"), "--out", "{tmp}"], {"plots"}),
    "quality": (["--quick"], {"holes", "exact_match", "edit_similarity", "parse_ok", "humaneval_items",
                              "humaneval_single_line_pass1", "latency_ms_by_canvas", "backend", "gate.threshold",
                              "gate.shown", "gate.shown_after_postprocess", "gate.syntax_breaks",
                              "gate.tree_sitter_breaks", "gate.tree_sitter_breaks_clean",
                              "gate.keystroke.syntax_breaks", "gate.keystroke.tree_sitter_breaks",
                              "gate.statement_check.added_cpu_ms_p50"}),
    "quant": (["--quick"], {"formats", "bytes_ratio", "max_rel_logit_err", "token_agreement", "kernel_max_rel_err",
                            "em_delta_int4", "em_delta_int4_ci", "es_delta_int8"}),
    "reliability": (["--quick"], {"malformed_sent", "unanswered", "crashes", "native_crashes", "wrong_place_edits",
                                  "wrong_document_edits", "max_block_ms", "rss_growth_mb", "rss_after_close_mb",
                                  "service_health_max_ms", "fuzz_edits", "divergences"}),
    "service": (["--quick"], {"embedded_p50_ms", "one_client_service_p50_ms", "all_clients_p50_ms", "outcomes",
                              "unanswered", "throughput", "steps_after_cancel_max", "service_rss_mb",
                              "service_gone_status_ms_max"}),
    "service_loop": (["--quick"], {"chars", "rounds", "service_health_max_ms", "service_health_p50_ms", "health_polls",
                                   "health_failed", "requests"}),
    "context": (["--quick"], {"holes", "recall", "precision_1024", "index_s", "index_mb", "overhead_p95_ms",
                              "prefix_reuse"}),
    "gguf": (["--quick"], {"q4_k_m_bytes", "published_bytes", "kernel_max_rel_err", "dequantizer_max_rel_err",
                           "logit_rel_err", "load_s", "mixes", "fit_4090", "machine"}),
    "vllm_standin": (["--quick"], {"canvas_tokens_per_fill", "canvas_token_steps_per_fill",
                                   "openai_vs_embedded_canvas_tokens", "keystroke_ms", "items", "errors"}),
    "step_profile": (["--quick"], {"syncs_per_step", "compiled_fullgraph", "graph_breaks", "ops_per_step",
                                   "encode_weight_passes_4k", "kv_bytes_per_token", "sliding_layers_bounded"}),
}


def runnable_modules() -> set[str]:
    return {p.stem for p in (ROOT / "bench").glob("*.py")
            if p.stem != "__main__" and "__main__" in p.read_text(encoding="utf-8")}


def test_every_runnable_module_has_a_quick_run():
    """A new benchmark joins QUICK (or test_bench_smoke, which runs `run` and `gpu_suite` and reads their files),
    or this fails."""
    assert runnable_modules() == set(QUICK) | {"run", "gpu_suite"}


def has_key(obj: dict, dotted: str) -> bool:
    """`"gate.syntax_breaks"`: obj["gate"]["syntax_breaks"] exists."""
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return False
        obj = obj[part]
    return True


@pytest.mark.parametrize("module", sorted(QUICK))
def test_quick_mode_prints_its_keys(module: str, tmp_path: Path, bench_run):
    args, keys = QUICK[module]
    last = bench_run(module, [a.replace("{tmp}", str(tmp_path)) for a in args])
    missing = {k for k in keys if not has_key(last, k)}
    assert not missing, f"bench.{module}'s last-line JSON lacks {sorted(missing)}"
