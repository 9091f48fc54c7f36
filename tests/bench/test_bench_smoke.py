"""Smoke tests of the benchmark harness at tiny sizes: the suite (`bench.run`) and the GPU suite's dry run, each in its
own process, write their JSON with the keys the report and the README rely on, and their files. Not timing tests
(STYLE rule 12). Every other bench module's quick mode runs in test_bench_quick."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench import gpu_model, plots, report  # noqa: E402
from engine.testing.tiny import build_tiny_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENGINE_KEYS = {"model", "canvas_sweep", "context_sweep", "acceptance", "prefix_cache", "cancel", "vs_transformers"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("bench") / "mixed", "mixed", canvas_length=16)


@pytest.fixture(scope="module")
def run_result(tiny, tmp_path_factory, bench_run):
    """`python -m bench.run --quick` on the tiny checkpoint, in its own process: (the JSON it saved, its folder)."""
    out = tmp_path_factory.mktemp("results")
    last = bench_run("run", ["--quick", "--editor", "skip", "--model", str(tiny), "--out", str(out)])
    assert {"json", "runtime_s", "model", "speedup_vs_transformers", "plots"} <= set(last)
    return json.loads(Path(last["json"]).read_text()), out


def test_run_writes_json_plots_and_markdown(run_result):
    result, out = run_result
    files = {p.name for p in out.iterdir()}
    json_files = [f for f in files if f.endswith(".json")]
    assert len(json_files) == 1
    saved = json.loads((out / json_files[0]).read_text())
    assert ENGINE_KEYS <= set(saved["engine"])
    assert {"cpu", "cores", "torch", "transformers", "device"} <= set(saved["machine"])
    assert {"step_vs_canvas.png", "step_vs_context.png", "parallel_vs_one_per_step.png", "latest.md"} <= files
    assert all((out / p).stat().st_size > 1000 for p in saved["plots"])
    md = (out / "latest.md").read_text()
    assert "Step time vs canvas length" in md and "transformers" in md and "Peak memory" in md


def test_engine_rows_have_the_documented_fields(run_result):
    e = run_result[0]["engine"]
    assert [r["canvas"] for r in e["canvas_sweep"]] == [8, 16]
    for row in e["canvas_sweep"] + e["context_sweep"]["rows"]:
        assert {"ms_per_step", "steps", "canvas_ms", "tokens_per_s"} <= set(row) and row["ms_per_step"] > 0
    assert {r["mode"] for r in e["acceptance"]} == {"parallel", "one_per_step", "default_steps"}
    assert all(r["tokens_accepted_per_step"] >= 1 for r in e["acceptance"])
    assert e["model"]["real_code_contexts"]  # the tiny checkpoint has a tokenizer
    assert e["prefix_cache"]["reused_prefix_tokens"] > 0
    assert e["cancel"]["steps_after_cancel_max"] <= 1
    assert {"speedup_vs_transformers", "engine_ms_per_step", "transformers_ms_per_step"} <= set(e["vs_transformers"])


def test_memory_is_measured_per_configuration_in_a_subprocess(run_result):
    rows = run_result[0]["memory"]["rows"]
    assert rows and all("error" not in r and r["peak_rss_mb"] > 50 for r in rows)


def test_latency_plot_and_editor_table(tmp_path, run_result):
    result = dict(run_result[0], editor={"samples_ms": [10.0, 12.5, 30.0, 11.0], "e2e_ms_p50": 11.7,
                                         "server_overhead_ms_p95": 1.2, "steps_after_cancel_max": 1})
    names = {p.name for p in plots.plot_all(result, tmp_path)}
    assert "keystroke_latency.png" in names and (tmp_path / "keystroke_latency.png").stat().st_size > 1000
    md = report.markdown(dict(result, plots=sorted(names)), "x.json")
    assert "keystroke to item p50" in md and "keystroke_latency.png" in md


def test_full_size_shape_matches_the_published_counts():
    counts = gpu_model.param_counts(gpu_model.text_config(gpu_model.GEMMA4_26B_A4B))  # meta device: no memory
    assert 25.0 <= counts["total_b"] <= 25.5 and 3.7 <= counts["active_b"] <= 3.9


def test_random_model_and_its_transformers_twin_agree():
    from engine.model.transformer import KVCache

    cfg = gpu_model.text_config(gpu_model.TINY)
    model = gpu_model.random_model(cfg, "cpu", torch.float32)
    assert not any(p.is_meta for p in model.parameters())
    twin = gpu_model.transformers_twin(model, gpu_model.TINY, canvas_length=16)
    assert twin.model.decoder.embed_tokens.weight.data_ptr() == model.embed_tokens.data_ptr()  # shared, not copied
    from transformers.cache_utils import DynamicCache

    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(6, cfg.vocab_size, (1, 40), generator=g)
    canvas = torch.randint(0, cfg.vocab_size, (1, 16), generator=g)
    with torch.no_grad():
        cache = DynamicCache(config=twin.config.get_text_config(decoder=True))
        twin.model.encoder(input_ids=ctx, cache=cache)
        want = twin(decoder_input_ids=canvas, cache=cache).logits
        got = model.decode(canvas, model.encode(ctx, KVCache()), None)
    torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)
    floor = gpu_model.weight_stream_floor(model, repeats=1)
    assert floor["weight_gb"] > 0 and floor["read_all_weights_ms"] > 0


def test_gpu_suite_dry_run_writes_its_files(tmp_path, bench_run):
    last = bench_run("gpu_suite", ["--quick", "--out", str(tmp_path)])
    assert {"json", "dry_run", "runtime_s", "random_ms_per_step_canvas256", "graphs_on_off_ms_per_step",
            "cold_encode_ms", "weight_stream_floor_ms", "speedup_vs_transformers", "shipped"} <= set(last)
    r = json.loads(Path(last["json"]).read_text())["random"]
    assert ENGINE_KEYS <= set(r) and {"weight_stream_floor", "params", "shape"} <= set(r)
    names = {p.name for p in tmp_path.iterdir()}
    assert "gpu.md" in names and any(n.startswith("gpu-") and n.endswith(".json") for n in names)
    assert "random_step_vs_canvas.png" in names


def test_gpu_sh_refuses_nothing_on_syntax():
    assert os.access(ROOT / "bench" / "gpu.sh", os.X_OK)
    subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu.sh")], check=True)


def test_a_failing_editor_run_is_reported_not_raised(monkeypatch):
    from bench import run

    def boom(*a, **k):
        raise RuntimeError("server crashed")

    monkeypatch.setattr(run, "_editor_latency", boom)
    out = run.editor_latency(None, True)
    assert "skipped" in out
    assert "server crashed" in out["skipped"] or "not in this checkout" in out["skipped"]
