"""Dream and LLaDA GGUF files written as llama.cpp's converter writes them (architecture, tensor names, LLaDA's q/k
permutation, tokenizer tables, special ids; engine.testing.gguf_mdm_write) load with `Engine.from_pretrained` as
their family and serve as their safetensors twins do: the F32 file against the published-layout checkpoint it was
converted from, the Q8_0 file against a checkpoint of its weights as gguf-py dequantizes them; the same logits
(max |diff| 0.0 in fp32), the same argmax fill, the same token ids from the tokenizer the file carries. `dg-lsp
--check --model FILE.gguf` exits 0 for each family (one child process each); what differs is refused by name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from engine.engine import Engine
from engine.formats.gguf import TOKENIZER_SOURCE
from engine.formats.gguf_mdm import IGNORED, hf_name, unpermute
from engine.testing.families import tiny_family
from engine.testing.gguf_mdm_write import write_mdm_gguf
from engine.testing.gguf_twin import save_aligned

ROOT = Path(__file__).resolve().parents[2]
VARIANT = {"dream": "gqa_untied", "llada": "mha"}
ARGMAX = {"dream": {"alg": "maskgit_plus", "temperature": 0.0}, "llada": {"temperature": 0.0}}
TEXT = ("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n")


def _hf_tensors(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        out.update({k: v.float() for k, v in load_file(str(f)).items()})
    return out


def _dequantized_twin(gguf_path: Path, src: Path, dst: Path) -> Path:
    """src's config and tokenizer files, and the GGUF's tensors as gguf-py dequantizes them under their HF names."""
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize

    dst.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.name != "model.safetensors.index.json":
            shutil.copy(f, dst / f.name)
    reader = GGUFReader(gguf_path)
    arch = str(reader.get_field("general.architecture").contents())
    heads = json.loads((src / "config.json").read_text()).get("n_heads")
    out = {}
    for t in reader.tensors:
        if t.name in IGNORED:
            continue
        w = torch.from_numpy(dequantize(np.asarray(t.data), GGMLQuantizationType(t.tensor_type)).copy())
        if arch == "llada" and t.name.endswith((".attn_q.weight", ".attn_k.weight")):
            w = unpermute(w, heads)  # MHA: q and k have n_heads heads
        out[hf_name(arch, t.name)] = w
    save_aligned(out, dst / "model.safetensors")
    return dst


@pytest.fixture(scope="module", params=["dream", "llada"])
def files(request, tmp_path_factory) -> dict[str, Path | str]:
    family = request.param
    root = tmp_path_factory.mktemp(f"gguf_{family}")
    src, _ = tiny_family(root / f"{family}-hf", family, VARIANT[family], seed=5)
    cfg, tensors = json.loads((src / "config.json").read_text()), _hf_tensors(src)
    f32 = write_mdm_gguf(cfg, tensors, root / f"{family}-f32.gguf", "F32", tokenizer_dir=src)
    q8 = write_mdm_gguf(cfg, tensors, root / f"{family}-q8_0.gguf", "Q8_0", tokenizer_dir=src)
    return {"family": family, "hf": src, "f32": f32, "q8_0": q8,
            "q8_0_twin": _dequantized_twin(q8, src, root / f"{family}-q8_0-twin")}


def _pair(files, kind: str) -> tuple[Engine, Engine]:
    twin = files["hf"] if kind == "f32" else files["q8_0_twin"]
    settings = ARGMAX[files["family"]]
    return (Engine.from_pretrained(files[kind], device="cpu", dtype="float32", sampler=settings),
            Engine.from_pretrained(twin, device="cpu", dtype="float32", sampler=settings))


@pytest.mark.parametrize("kind", ["f32", "q8_0"])
def test_the_gguf_serves_as_its_safetensors_twin(files, kind):
    g, st = _pair(files, kind)
    assert g.family.name == files["family"] == st.family.name and g.prompt_format.name == "mask"
    assert g.config.text == st.config.text and g.config.eos_token_ids == st.config.eos_token_ids
    assert g.tokenizer_source == TOKENIZER_SOURCE  # the file's own tables, nothing beside it
    sample = "x = 1  # <|endoftext|> é\n\tdef f():"
    assert g.encode(sample) == st.encode(sample) and g.decode(g.encode(sample)) == sample
    ctx = st.context_ids(*TEXT)
    logits_g, logits_st = g.check_logits(ctx, 16), st.check_logits(ctx, 16)
    assert float((logits_g - logits_st).abs().max()) == 0.0
    a, b = g.infill(ctx, canvas_length=16), st.infill(ctx, canvas_length=16)
    assert a.ids == b.ids and a.steps == b.steps == 16 and a.text == b.text
    assert a.confidence == pytest.approx(b.confidence, abs=0.0)


def test_q8_0_weights_are_the_files_not_the_originals(files):
    """The Q8_0 file's logits are its own (within quantization error of the F32 file's), not the F32 ones."""
    ctx = Engine.from_pretrained(files["hf"], device="cpu").context_ids(*TEXT)
    f32 = Engine.from_pretrained(files["f32"], device="cpu", dtype="float32").check_logits(ctx, 8)
    q8 = Engine.from_pretrained(files["q8_0"], device="cpu", dtype="float32").check_logits(ctx, 8)
    diff = float((f32 - q8).abs().max())
    assert 0.0 < diff < 0.05 * float(f32.abs().max())


def test_the_prompt_follows_the_files_add_bos_token(files):
    """LLaDA's converter writes add_bos_token true (its prompts start with <|startoftext|>); Dream's writes none."""
    g = Engine.from_pretrained(files["f32"], device="cpu")
    st = Engine.from_pretrained(files["hf"], device="cpu")
    bos = st.tokenizer.token_to_id("<|startoftext|>")
    want = ([bos] if files["family"] == "llada" else []) + st.context_ids(*TEXT)
    assert g.context_ids(*TEXT) == want


def test_a_tokenizer_json_beside_the_file_wins_and_a_directory_holding_the_file_loads(files, tmp_path):
    shutil.copy(files["f32"], tmp_path / "model.gguf")
    shutil.copy(files["hf"] / "tokenizer.json", tmp_path / "tokenizer.json")
    eng = Engine.from_pretrained(tmp_path, device="cpu")
    assert eng.family.name == files["family"] and str(tmp_path / "tokenizer.json") in eng.tokenizer_source


def test_a_file_without_tokenizer_tables_serves_the_id_api_and_says_why(files, tmp_path):
    cfg = json.loads((files["hf"] / "config.json").read_text())
    path = write_mdm_gguf(cfg, _hf_tensors(files["hf"]), tmp_path / "bare.gguf")
    eng = Engine.from_pretrained(path, device="cpu")
    assert eng.tokenizer is None and "no tokenizer.ggml.tokens" in eng.tokenizer_source
    assert len(eng.infill([5, 6, eng.config.text.mask_token_id, 7], canvas_length=4).ids) <= 4


def test_what_differs_is_refused_by_name(files, tmp_path):
    from engine.config import ConfigError

    with pytest.raises(ValueError, match=f"the {files['family']} family does not support weights 'int8'"):
        Engine.from_pretrained(files["f32"], device="cpu", weights="int8")
    cfg = {k: v for k, v in json.loads((files["hf"] / "config.json").read_text()).items() if k != "mask_token_id"}
    src = tmp_path / "nomask"
    shutil.copytree(files["hf"], src)
    (src / "config.json").write_text(json.dumps(cfg))
    (src / "tokenizer_config.json").write_text("{}")
    path = write_mdm_gguf(cfg, _hf_tensors(src), tmp_path / "nomask.gguf", tokenizer_dir=src)
    with pytest.raises(ConfigError, match="no tokenizer.ggml.mask_token_id: not a mask-diffusion file"):
        Engine.from_pretrained(path, device="cpu")


def test_dg_lsp_check_on_the_gguf_exits_0(files, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
               XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_RUNTIME_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "dg_lsp", "--check", "--model", str(files["q8_0"]), "--device",
                          "cpu"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is True and report["sampler"]["family"]["value"] == files["family"]
    assert report["checkpoint"]["format"] == "gguf" and report["checkpoint"]["architecture"] == files["family"]
    assert report["checkpoint"]["tensor_types"]["Q8_0"]["tensors"] > 0
    assert report["checkpoint"]["tokenizer"] == TOKENIZER_SOURCE and report["prompt_format"] == "mask"
    assert isinstance(report["fill"], str) and report["steps"] >= 1


def test_a_qwen2_pre_tokenizer_is_rebuilt_as_qwen2s_tokenizer_json_declares_it(files, tmp_path):
    """Dream's vocabulary is Qwen2's: llama.cpp names its pre-tokenizer "qwen2" (NFC, Qwen2's split regex, bytes);
    the file's tables give the ids the HF tokenizer.json gives (NFD text composed, as the GPT-2 split does not)."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

    if files["family"] != "dream":
        pytest.skip("LLaDA's vocabulary is not Qwen2's")
    src = tmp_path / "qwen"
    shutil.copytree(files["hf"], src)
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.normalizer = normalizers.NFC()
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")  # as Qwen2's tokenizer.json spells it
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.save(str(src / "tokenizer.json"))
    cfg = json.loads((src / "config.json").read_text())
    path = write_mdm_gguf(cfg, _hf_tensors(src), tmp_path / "qwen.gguf", tokenizer_dir=src)
    eng = Engine.from_pretrained(path, device="cpu")
    assert eng.tokenizer_source == TOKENIZER_SOURCE
    sample = "x = 12345  # cafe\u0301 WE'LL return\n\n\t  y<|endoftext|>"
    assert eng.encode(sample) == tok.encode(sample, add_special_tokens=False).ids
    gpt2 = Engine.from_pretrained(files["f32"], device="cpu")  # the same vocabulary under the GPT-2 split
    assert eng.decode(eng.encode("cafe\u0301")) == "caf\u00e9" != gpt2.decode(gpt2.encode("cafe\u0301"))
