"""engine.quant.memory: bytes per format from the shape alone, the fit check's message, what "auto" picks."""

from __future__ import annotations

import pytest
import torch

from engine.config import load_config
from engine.quant import memory as M
from engine.quant.modules import weight_bytes as loaded_bytes
from engine.quant.plan import WeightPlan, resolve

GB = 1e9


def test_26b_a4b_shape_matches_the_published_counts():
    counts = M.param_counts(M.gemma4_26b_a4b())
    assert abs(counts["total"] - 25.2e9) < 0.1e9  # 25.25B
    assert abs(counts["active"] - 3.8e9) < 0.1e9  # 3.84B


def test_26b_a4b_int4_fits_under_15_gb_from_the_shape_alone():
    cfg = M.gemma4_26b_a4b()
    per = M.bytes_by_format(cfg)  # built on the meta device: nothing of 50 GB is allocated
    assert per["int4"] <= 15 * GB
    assert per["int4"] / per["bf16"] <= 0.3
    assert 45 * GB < per["bf16"] < 55 * GB
    assert per["int4"] < per["int8"] == per["fp8"] < per["bf16"]


@pytest.mark.parametrize("fmt", ["bf16", "int8", "int4", "fp8"])
def test_shape_accounting_equals_a_loaded_model(tiny_ckpts, fmt):
    path = tiny_ckpts["sliding_heavy"]
    cfg = load_config(path).text
    from engine.loader import load_model

    model = load_model(path, cfg, torch.device("cpu"), torch.float32, WeightPlan(fmt, torch.device("cpu"),
                                                                                  torch.float32))
    assert loaded_bytes(model) == M.weight_bytes(cfg, fmt, compute_bytes=4)


def test_a_24_gb_card_is_told_to_use_int4():
    cfg = M.gemma4_26b_a4b()
    free = int(23.6 * GB)
    with pytest.raises(M.FitError) as err:
        M.choose(cfg, "bf16", free)
    msg = str(err.value)
    assert msg.startswith("needs 50.5 GB in bf16")
    assert "the device has 23.6 GB free: try weights=int4 (14.3 GB)" in msg
    assert M.choose(cfg, "auto", free).fmt == "int4"


def test_auto_picks_the_widest_format_that_fits():
    cfg = M.gemma4_26b_a4b()
    assert M.choose(cfg, "auto", int(80 * GB)).fmt == "bf16"
    assert M.choose(cfg, "auto", int(32 * GB)).fmt == "int8"
    assert M.choose(cfg, "auto", int(32 * GB), own="fp8").fmt == "fp8"  # a checkpoint's own format is kept
    assert M.choose(cfg, "auto", int(20 * GB), own="fp8").fmt == "int4"
    with pytest.raises(M.FitError, match="even weights=int4"):
        M.choose(cfg, "auto", int(8 * GB))


def test_an_explicit_format_that_fits_is_kept():
    cfg = M.gemma4_26b_a4b()
    fit = M.choose(cfg, "int8", int(40 * GB))
    assert fit.fmt == "int8" and fit.fits


def test_resolve_refuses_before_loading(tiny_ckpts):
    path = tiny_ckpts["mixed"]
    cfg = load_config(path).text
    with pytest.raises(M.FitError, match="try weights=int4"):
        # room for the int4 weights (and the fill) but not for bf16 ones
        free = M.weight_bytes(cfg, "int4", 4) + M.reserve_bytes(cfg, 4, overhead=0) + 1
        resolve("bf16", path, cfg, torch.device("cpu"), torch.float32, free=free)
    with pytest.raises(ValueError, match="weights must be one of"):
        resolve("int3", path, cfg, torch.device("cpu"), torch.float32)


def test_report_lists_every_format():
    rep = M.report(M.gemma4_26b_a4b(), "cpu")
    assert set(rep["bytes"]) == {"bf16", "int8", "int4", "fp8"}
    assert any(line.startswith("weights int4: 14.3") for line in rep["lines"])
