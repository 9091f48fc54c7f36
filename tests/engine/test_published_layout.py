"""The published checkpoint's layout at tiny scale: it loads, prompts through its chat template, generates exactly
as transformers does on the chat-rendered ids, stops at its end of turn, and `dg-lsp --check` shows it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from tokenizers import Tokenizer
from transformers import DiffusionGemmaForBlockDiffusion

from engine.engine import Engine
from engine.seam import HoleInfo
from engine.testing.published import SPECIAL, build_published_checkpoint

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    return build_published_checkpoint(tmp_path_factory.mktemp("published") / "dg")


def _dg_check(model: Path) -> tuple[int, dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = subprocess.run([sys.executable, "-m", "dg_lsp", "--check", "--model", str(model)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    return out.returncode, json.loads(out.stdout.strip().splitlines()[-1])


def test_files_are_laid_out_like_the_published_checkpoint(published):
    assert not (published / "model.safetensors").exists()
    index = json.loads((published / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) == 3
    names = set()
    for shard in shards:
        with safe_open(str(published / shard), framework="pt") as f:
            names |= set(f.keys())
            assert all(f.get_slice(k).get_dtype() == "BF16" for k in f.keys())
    assert names == set(index["weight_map"])
    assert any("vision_tower" in n for n in names)
    cfg = json.loads((published / "config.json").read_text())
    assert cfg["architectures"] == ["DiffusionGemmaForBlockDiffusion"] and cfg["vision_config"]
    assert {"num_experts", "top_k_experts", "moe_intermediate_size", "layer_types"} <= set(cfg["text_config"])
    tok = Tokenizer.from_file(str(published / "tokenizer.json"))
    assert all(tok.token_to_id(t) is not None for t in SPECIAL)
    assert not any("fim" in t for t in tok.get_vocab())
    gen = json.loads((published / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [tok.token_to_id("<eos>"), tok.token_to_id("<turn|>")]
    assert "<|turn>" in (published / "chat_template.jinja").read_text()
    assert json.loads((published / "tokenizer_config.json").read_text())["bos_token"] == "<bos>"


CASES = [
    ("def add(a, b):\n    return ", "\n", "rest_of_line"),
    ("import os\n\n", "\nprint(1)\n", "statement"),
    ("for i in range(3):\n", "", "block_body"),
    ("x = [", "]\n", "bracket_expr"),
]


def test_chat_generation_is_token_identical_to_transformers(published):
    eng = Engine.from_pretrained(published, device="cpu", dtype="float32")
    ref = DiffusionGemmaForBlockDiffusion.from_pretrained(published, dtype=torch.float32).eval()
    eos = eng.config.eos_token_ids
    assert list(eos) == ref.generation_config.eos_token_id and len(eos) == 2
    turn_end = eng.tokenizer.token_to_id("<turn|>")
    ended_on_turn, lengths = 0, set()
    for seed, (prefix, suffix, kind) in enumerate(CASES):
        ids = eng.prompt_format.context(eng.encode(prefix), eng.encode(suffix),
                                        HoleInfo(kind=kind, language="python", filename="a.py"))
        torch.manual_seed(seed)
        seq = ref.generate(torch.tensor([ids]), max_new_tokens=64).sequences[0, len(ids):].tolist()
        stop = next((i for i, t in enumerate(seq) if t in eos), len(seq))
        want = [t for t in seq[:stop] if t != eng.config.text.pad_token_id]
        got = eng.generate_ids(ids, max_new_tokens=64, seed=seed, reference_compatible=True)
        assert got == want, (prefix, suffix)
        ended_on_turn += stop < len(seq) and seq[stop] == turn_end
        lengths.add(len(want))
    assert ended_on_turn >= 2  # stopping at <turn|> (generation_config.json only) was exercised
    assert len(lengths) >= 3  # and the cases are not all the same trivial answer


def test_check_shows_the_chat_prompt(published):
    code, out = _dg_check(published)
    assert code == 0 and out["ok"], out
    assert out["prompt_format"] == "chat"
    preview = out["prompt_preview"]
    assert preview.startswith("<bos><|turn>user\n") and preview.count("<bos>") == 1
    assert preview.endswith("<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")
    assert "def add(a, b):\n    return <FILL_HERE>" in preview
    tok = Tokenizer.from_file(str(published / "tokenizer.json"))
    assert out["eos_ids"] == [tok.token_to_id("<eos>"), tok.token_to_id("<turn|>")]
    assert out["sampler"]["steps"] == {"value": 8, "source": "generation_config.json"}
    assert out["sampler"]["max_new_tokens"]["source"] == "default"
    assert out["sampler"]["canvas_length"] == {"value": 32, "source": "config.json"}
    assert out["weights_bytes"] > 0 and out["device"] in ("cpu", "cuda") and out["dtype"]
    # memory: the checkpoint's bytes per format (int4 the smallest), the format in force, the KV cache per context
    per = out["memory"]["bytes"]
    assert per["int4"] < per["int8"] < per["bf16"] and out["weights"] == out["memory"]["auto"]
    assert any(line.startswith("weights int4:") for line in out["memory"]["lines"])
    assert 0 < out["kv_bytes_per_token"] and out["kv_bytes_4k_context"] > out["kv_bytes_per_token"]
    assert isinstance(out["fill"], str) and out["steps"] >= 1


def test_check_without_a_prompt_format_fails_with_what_to_add(published, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(published, bare)
    (bare / "chat_template.jinja").unlink()
    code, out = _dg_check(bare)
    assert code == 1 and out["ok"] is False
    assert "chat_template.jinja" in out["error"] and "infill.json" in out["error"]
