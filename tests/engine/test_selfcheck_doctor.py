"""`dg-lsp doctor` (engine.tools.doctor) reports what the self-check found, and a plan that does not fit the device
is a message naming what would fit, given before anything is loaded (the device's free memory is the test double)."""

from __future__ import annotations

import dataclasses

import pytest

from engine import engine as engine_module
from engine.denoising.checked_runner import default_table
from engine.engine import Engine
from engine.formats import gguf_write as W
from engine.kernels.table import Target, vocab_piece
from engine.quant import memory
from engine.quant.plan import resolve
from engine.testing.tiny import build_tiny_checkpoint
from engine.tools import doctor

GGUF_SHAPE = dict(  # the shape tests/quant writes as GGUF (hidden and head sizes that fill whole ggml blocks)
    hidden_size=256, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
    head_dim=128, global_head_dim=256, num_global_key_value_heads=1, sliding_window=8,
    layer_types=["sliding_attention", "full_attention", "full_attention"],
    num_experts=4, top_k_experts=2, moe_intermediate_size=32,
)


def raising(*_a):
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def failing_vocab(t: Target):
    bad = dataclasses.replace(vocab_piece(t), fast=raising, applies=lambda t: True)
    return [bad if p.name == "vocab_pass" else p for p in default_table(t)]


def test_doctor_reports_a_piece_that_fell_back_and_still_fills(tiny_mixed):
    r = doctor.run(str(tiny_mixed), "cpu", table=failing_vocab)
    assert r["ok"] is False and "error" not in r
    assert r["self_checks"]["fellBack"] == [{"piece": "vocab_pass",
                                             "reason": "raised RuntimeError: CUDA error: an illegal memory access "
                                                       "was encountered"}]
    assert r["fill"]["steps"] >= 1 and r["fill"]["tokens_per_s"] > 0 and r["floor"]["bandwidth_gb_s"] > 0
    out = doctor.text(r)
    assert "vocab_pass: FELL BACK: raised RuntimeError" in out and out.endswith(f"NOT OK in {r['seconds']} s")


def test_doctor_on_a_healthy_cpu_engine(tiny_mixed):
    r = doctor.run(str(tiny_mixed), "cpu")
    assert r["ok"] is True, r.get("error")
    assert r["versions"]["torch"] and r["device"]["device"] == "cpu" and r["device"]["free_bytes"] > 0
    assert r["self_checks"]["checked"] == [] and "cuda_graphs" in r["self_checks"]["not_applicable"]
    assert r["plan"]["weights"] == "bf16" and r["plan"]["kv_bytes_per_token"] > 0
    assert r["fill"]["ms_per_step"] > 0
    assert "not applicable here: vocab_pass, compile, cuda_graphs" in doctor.text(r)


def test_a_plan_that_does_not_fit_is_a_message_before_loading(tiny_mixed, monkeypatch):
    cfg = Engine.from_pretrained(tiny_mixed, device="cpu").config.text
    free = memory.weight_bytes(cfg, "int4", 4) + memory.reserve_bytes(cfg, 4, overhead=0) + 1
    monkeypatch.setattr(memory, "free_bytes", lambda device: free)  # the device's free-memory query

    def no_load(*a, **k):
        raise AssertionError("loaded although the plan does not fit")

    monkeypatch.setattr(engine_module, "load_model", no_load)
    with pytest.raises(memory.FitError) as err:
        Engine.from_pretrained(tiny_mixed, device="cpu", weights="bf16")
    msg = str(err.value)
    assert "in bf16 (+" in msg and "for a KV cache of 8k context tokens and the fill" in msg
    assert "try weights=int4" in msg
    r = doctor.run(str(tiny_mixed), "cpu", "bf16")
    assert r["ok"] is False and "try weights=int4" in r["error"] and "plan" not in r
    assert "error: FitError: needs" in doctor.text(r) and "versions: dg-lsp" in doctor.text(r)


def test_a_gguf_that_does_not_fit_names_what_would(tmp_path):
    src = build_tiny_checkpoint(tmp_path / "hf", GGUF_SHAPE, canvas_length=16, seed=5)
    path = W.write_gguf(src, tmp_path / "tiny-Q8_0.gguf", "Q8_0")
    cfg = Engine.from_pretrained(src, device="cpu").config.text
    import torch

    cpu = torch.device("cpu")
    reserve = memory.reserve_bytes(cfg, 4, overhead=0)
    with pytest.raises(memory.FitError) as err:
        resolve("auto", path, cfg, cpu, torch.float32, free=memory.weight_bytes(cfg, "int4", 4) + reserve + 1)
    # the file type from general.file_type, which gguf_write records (as llama.cpp does)
    assert str(err.value).startswith("tiny-Q8_0.gguf (Q8_0) needs ") and "try weights=int4" in str(err.value)
    with pytest.raises(memory.FitError, match="use a smaller quant of the file"):
        resolve("auto", path, cfg, cpu, torch.float32, free=reserve)
