"""Mask-diffusion families through the engine seam, as the server uses them: `Engine.from_pretrained` on each
family's published-layout fixture, `dg-lsp --check` exiting 0, canvases sized to the hole, drafts, cancel within
one step, the fill's confidence, a rewrite from a seeded canvas, and what a family cannot do refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.engine import Engine
from engine.seam import CancelToken, InfillBackend, PromptFormat
from engine.testing.families import tiny_family

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=[("dream", "gqa_untied"), ("llada", "mha")], ids=["dream", "llada"])
def checkpoint(request, tmp_path_factory) -> Path:
    family, variant = request.param
    return tiny_family(tmp_path_factory.mktemp(family) / f"{family}-tiny", family, variant, seed=4)[0]


def test_the_engine_meets_the_seam_with_a_mask_infill_prompt(checkpoint):
    eng = Engine.from_pretrained(checkpoint, device="cpu")
    assert isinstance(eng, InfillBackend) and isinstance(eng.prompt_format, PromptFormat)
    fmt = eng.prompt_format
    mask = eng.config.text.mask_token_id
    # the user's own text never moves the hole: a mask id it tokenizes to is dropped
    spelled = eng.decode([mask])
    ids = fmt.context(eng.encode(f"a = {spelled}1 + "), eng.encode("\n"), None)
    assert fmt.name == "mask" and ids.count(mask) == 1 and eng.decode(ids) == f"a = 1 + {spelled}\n"


@pytest.mark.parametrize("length", [16, 32])
def test_the_canvas_is_sized_to_the_hole_and_drafts_come_every_step(checkpoint, length):
    eng = Engine.from_pretrained(checkpoint, device="cpu")
    drafts = []
    res = eng.infill(eng.context_ids("def f(x):\n    return ", "\n"), canvas_length=length, steps=8,
                     on_step=drafts.append, draft_text=True)
    assert res.steps == 8 == len(drafts) and [d.step for d in drafts] == list(range(1, 9))
    assert len(res.ids) <= length and res.text == eng.decode(res.ids) and not res.cancelled
    assert res.confidence is not None and 0 < res.confidence <= 1 and len(res.token_probs) >= len(res.ids)


def test_cancel_stops_within_one_step(checkpoint):
    eng = Engine.from_pretrained(checkpoint, device="cpu")
    token = CancelToken()
    res = eng.infill(eng.context_ids("x = ", "\n"), canvas_length=16, steps=16, cancel=token,
                     on_step=lambda d: token.cancel() if d.step == 2 else None)
    assert res.cancelled and res.steps == 2 and res.text == "" and res.confidence is None


def test_a_rewrite_starts_from_the_seeded_canvas(checkpoint):
    eng = Engine.from_pretrained(checkpoint, device="cpu")
    ctx = eng.context_ids("y = ", "\n")
    seed_ids = eng.encode("compute(1, 2)")
    kept = eng.infill(ctx, canvas_length=16, init_ids=seed_ids, start_noise=0.0)
    assert kept.ids == seed_ids and kept.steps == 16 and kept.confidence is not None  # nothing masked: kept as is
    partly = eng.infill(ctx, canvas_length=16, init_ids=seed_ids, start_noise=0.5, seed=2)
    same = sum(a == b for a, b in zip(partly.ids, seed_ids, strict=False))
    assert 0 < same < len(seed_ids) or partly.ids != seed_ids


def test_what_a_family_cannot_do_is_refused_by_name(checkpoint):
    eng = Engine.from_pretrained(checkpoint, device="cpu")
    name = eng.family.name
    with pytest.raises(ValueError, match=f"the {name} family has no entropy bound"):
        eng.infill([5], canvas_length=16, entropy_bound=0.2)
    with pytest.raises(ValueError, match=f"the {name} family does not support one_per_step"):
        eng.infill([5], canvas_length=16, one_per_step=True)
    with pytest.raises(ValueError, match=f"the {name} family does not support weights 'int8'"):
        Engine.from_pretrained(checkpoint, device="cpu", weights="int8")


def test_dg_lsp_check_exits_0_on_the_published_layout(checkpoint):
    env = dict(os.environ, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "dg_lsp", "--check", "--model", str(checkpoint)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    out = json.loads(run.stdout[run.stdout.index("{"):])
    assert out["ok"] and out["prompt_format"] == "mask" and out["sampler"]["family"]["value"] in ("dream", "llada")
    assert out["seeded"]["identical"]  # start_noise 0: the seed is kept


def test_the_dual_cache_row_pass_is_the_full_pass_until_the_window_changes(checkpoint):
    """Right after a full pass, recomputing only some rows against its K/V gives those rows' predictions (with
    Dream's shift, from the row before; a range at position 0 included), so the approximation is only staleness."""
    from engine.families.dense import WindowKV

    eng = Engine.from_pretrained(checkpoint, device="cpu", dtype="float32")
    x = eng.context_ids("def f(x):\n    return ", "\n")
    x = torch.tensor([x[:5] + [eng.config.text.mask_token_id] * 9 + x[5:]])
    kv = WindowKV([], [])
    with torch.no_grad():
        full = eng.model(x, kv)
        for a, b in ((5, 14), (0, 6), (3, x.shape[1])):
            assert (eng.model.rows(x, a, b, kv) - full[:, a:b]).abs().max().item() <= 1e-5


def test_dual_cache_is_opt_in_and_exact_when_it_refreshes_every_step(checkpoint):
    ctx = Engine.from_pretrained(checkpoint, device="cpu").context_ids("x = ", "\nprint(x)\n")
    exact = Engine.from_pretrained(checkpoint, device="cpu")
    every = Engine.from_pretrained(checkpoint, device="cpu", sampler={"dual_cache": 1})
    cached = Engine.from_pretrained(checkpoint, device="cpu", sampler={"dual_cache": 4})
    assert exact.settings_in_force()["dual_cache"]["value"] is None
    assert cached.settings_in_force()["dual_cache"] == {"value": 4, "source": "setting"}
    want = exact.infill(ctx, canvas_length=16, steps=8, seed=1)
    assert every.infill(ctx, canvas_length=16, steps=8, seed=1).ids == want.ids
    res = cached.infill(ctx, canvas_length=16, steps=8, seed=1)
    assert res.steps == 8 and not res.cancelled and len(res.ids) <= 16
    with pytest.raises(ValueError, match="dual_cache must be"):
        Engine.from_pretrained(checkpoint, device="cpu", sampler={"dual_cache": 0})
