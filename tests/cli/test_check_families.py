"""Each mask-diffusion family's tiny checkpoint in its published layout (engine/testing/families.py: Dream's shapes,
Open-dCoder's stock Qwen2 config, LLaDA's OLMo-style files) loads with `Engine.from_pretrained` as the family it is
and fills a canvas, and `dg-lsp --check --model DIR` on it exits 0 with one JSON object saying ok (one child
process per published layout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import run

from engine.testing.families import DREAM_VARIANTS, LLADA_VARIANTS, tiny_family

# (family, shape, layout): every shape the fixture writer names, and Open-dCoder's qwen2 config
LAYOUTS = ([("dream", v, "dream") for v in DREAM_VARIANTS] + [("dream", "gqa_untied", "open_dcoder")]
           + [("llada", v, "llada") for v in LLADA_VARIANTS])
MASK_TOKEN = {"dream": "<|mask|>", "open_dcoder": "<|mask|>", "llada": "<|mdm_mask|>"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[tuple[str, str, str], Path]:
    root = tmp_path_factory.mktemp("families")
    return {(f, v, lay): tiny_family(root / f"{lay}-{v}", f, v, layout="dream" if f == "dream" else lay, seed=3)[0]
            for f, v, lay in LAYOUTS}


def mask_id(path: Path, layout: str) -> int:
    """The mask token's id as the published tokenizer.json spells it (the config of Open-dCoder names none)."""
    added = json.loads((path / "tokenizer.json").read_text())["added_tokens"]
    return next(t["id"] for t in added if t["content"] == MASK_TOKEN[layout])


@pytest.mark.parametrize("case", LAYOUTS, ids=["-".join(c[::-1][:2]) for c in LAYOUTS])
def test_the_published_layout_loads_as_its_family_and_fills(checkpoints, case):
    from engine.engine import Engine

    family, _, layout = case
    path = checkpoints[case]
    eng = Engine.from_pretrained(path, device="cpu")
    assert eng.family.name == family and eng.prompt_format.name == "mask"
    assert eng.config.text.mask_token_id == mask_id(path, layout)
    res = eng.infill(eng.context_ids("def f(x):\n    return ", "\n"), canvas_length=8, steps=4)
    assert res.steps == 4 and len(res.ids) <= 8 and eng.config.text.mask_token_id not in res.ids


@pytest.mark.parametrize("case", [("dream", "gqa_untied", "dream"), ("dream", "gqa_untied", "open_dcoder"),
                                  ("llada", "mha", "llada")], ids=["dream", "open_dcoder", "llada"])
def test_dg_lsp_check_exits_0_with_ok_true(checkpoints, case, tmp_path):
    path = checkpoints[case]
    out = run(["--check", "--model", str(path), "--device", "cpu"], tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(out.stdout.strip().splitlines()) == 1  # one JSON object, one line
    report = json.loads(out.stdout)
    assert report["ok"] is True and "error" not in report
    assert report["model"] == str(path) and report["device"] == "cpu"
    assert report["prompt_format"] == "mask" and report["sampler"]["family"]["value"] == case[0]
    assert report["checkpoint"]["format"] == "safetensors" and str(path / "tokenizer.json") in str(
        report["checkpoint"]["tokenizer"])
    assert isinstance(report["fill"], str) and report["steps"] >= 1
