"""GGUF checkpoints (llama.cpp's `diffusion-gemma`): our dequantizers against gguf-py's, a tiny model written under
the real names in the published mixes loading packed and computing exactly what its dequantized weights compute
from safetensors, split files, metadata, and files this engine must refuse with a message naming why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf_checkpoints import GGUF_SHAPE, dequantized_twin
from quant_checkpoints import logits
from test_fp8_published import self_conditioned_steps

from engine.engine import Engine
from engine.formats import gguf as G
from engine.formats import gguf_write as W
from engine.formats.gguf_quants import BLOCKS, dequantize, quantize_k, quantize_q8_0
from engine.quant.modules import QuantLinear, QuantTable, QuantWeight
from engine.quant.native import build
from engine.testing.tiny import build_tiny_checkpoint


def _random_blocks(qtype: str, rows: int, blocks: int, rng) -> np.ndarray:
    """Random bytes with finite fp16 scale fields (random bytes elsewhere: every quant value is exercised)."""
    block, size = BLOCKS[qtype]
    if qtype in ("F32", "F16"):
        return rng.standard_normal((rows, blocks)).astype(np.float32 if qtype == "F32" else np.float16).view(np.uint8)
    raw = rng.integers(0, 256, (rows * blocks, size), dtype=np.uint8)
    halves = {"Q8_0": [0], "Q5_0": [0], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "BF16": []}
    for at in halves[qtype]:
        raw[:, at:at + 2] = (rng.standard_normal((raw.shape[0], 1)) * 0.1).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, blocks * size)


@pytest.mark.parametrize("qtype", list(BLOCKS))
def test_dequantizers_bit_equal_gguf_py(qtype):
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as reference

    rng = np.random.default_rng(list(BLOCKS).index(qtype))
    raw = _random_blocks(qtype, 5, 37, rng)
    want = reference(raw, GGMLQuantizationType[qtype])
    got = dequantize(torch.from_numpy(raw), qtype, want.shape[-1])
    assert got.shape == want.shape
    assert np.array_equal(got.numpy().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("qtype,max_err", [("Q4_K", 0.08), ("Q5_K", 0.04), ("Q6_K", 0.02)])
def test_k_quantizer_writes_blocks_gguf_py_reads(qtype, max_err):
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as reference

    w = torch.randn(6, 768, generator=torch.Generator().manual_seed(0))
    packed = quantize_k(w, qtype)
    assert packed.shape == (6, 768 // 256 * BLOCKS[qtype][1])
    back = torch.from_numpy(reference(packed.numpy(), GGMLQuantizationType[qtype]))
    assert float((back - w).abs().max() / w.abs().max()) < max_err  # half a step of the block's range
    assert torch.equal(dequantize(packed, qtype, 768), back)



def test_q8_0_quantizer_writes_gguf_pys_bytes():
    """The torch Q8_0 quantizer (the device bench builds packed weights with it) writes gguf-py's exact bytes,
    zero blocks and values halfway between two steps included."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize as reference

    x = torch.randn(3, 5, 96, generator=torch.Generator().manual_seed(1)) * 3
    x[0, 0, :32] = 0
    x[1, 0, :32] = torch.arange(32) - 15.5  # halves of a step of 1 (d = 127 / 127) below: rounded away from zero
    x[1, 0, 0] = 127.0
    want = reference(x.numpy(), GGMLQuantizationType.Q8_0)
    assert np.array_equal(quantize_q8_0(x).numpy(), want)

def test_q4_k_m_rule_reproduces_the_published_26b_mix():
    from engine.quant.memory import gemma4_26b_a4b

    mix = W.mix_bytes(gemma4_26b_a4b())
    assert {t: m["tensors"] for t, m in mix.items()} == {"F32": 423, "Q4_K": 194, "Q5_0": 33, "Q8_0": 28, "Q6_K": 14}
    total = sum(m["bytes"] for m in mix.values())
    assert abs(total / 16.8e9 - 1) < 0.02, total


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return build_tiny_checkpoint(root / "hf", GGUF_SHAPE, canvas_length=16, seed=5), root


@pytest.mark.parametrize("way", ["native", "torch"])
@pytest.mark.parametrize("rule", ["q4_k_m", "Q5_K", "Q8_0", "BF16"])
def test_tiny_gguf_computes_what_its_dequantized_weights_compute(tiny, rule, way, monkeypatch):
    """Served packed, a GGUF computes what its dequantized twin does: exactly on the torch tile path (the same fp32
    values through the same GEMMs), to fp32 summation order on the native one (engine.quant.native: the same values,
    its own dot products)."""
    monkeypatch.setenv("DG_CPU_ACTIVATIONS", "fp32")  # x exact: the 8-bit product is checked per matmul
    if way == "torch":
        monkeypatch.setenv("DG_NATIVE", "0")
    build.reset()
    monkeypatch.setattr(build, "_state", {})  # the library state as this test found it comes back after
    if way == "native" and build.load() is None:
        pytest.skip(f"the native library does not build here: {build.reason()}")
    src, root = tiny
    path = W.write_gguf(src, root / f"{rule}.gguf", W.q4_k_m_type if rule == "q4_k_m" else rule)
    info = G.open_gguf(path)
    types = set(info.type_counts())
    want_types = {"q4_k_m": {"F32", "Q4_K", "Q5_0", "Q8_0", "Q6_K"}, "Q5_K": {"F32", "Q5_K", "Q5_1"},
                  "Q8_0": {"F32", "Q8_0"}, "BF16": {"F32", "BF16"}}[rule]
    assert types == want_types
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")  # weights=auto: blocks kept packed
    ref = Engine.from_pretrained(dequantized_twin(path, src, root / f"{rule}_deq"), device="cpu", dtype="float32",
                                 weights="bf16")
    assert eng.weights == "gguf"
    if rule != "BF16":
        q = eng.model.layers[0].self_attn.q_proj
        assert isinstance(q, QuantLinear) and q.fmt.startswith("gguf:") and q.qweight.dtype == torch.uint8
        assert isinstance(eng.model.layers[0].moe.gate_up_proj, QuantWeight)
        # the tied table: kept as stored where the native kernels read it, else dense in the compute dtype
        table = eng.model.embed_tokens
        assert isinstance(table, QuantTable) == (way == "native"), type(table)
        if way == "native":
            assert table.dtype == torch.float32 and table.shape == tuple(ref.model.embed_tokens.shape)
    # the twin lies at the GGUF's alignment (engine.testing.gguf_twin), so even one-row products agree: exact on
    # the torch path; on the native one a code or scale off by one would move a logit far more than 1e-4 of the
    # largest
    # (1e-3 after self-conditioned steps: the random model amplifies each step's rounding into the next)
    exact = way == "torch" or rule == "BF16"
    _close(logits(eng), logits(ref), 0 if exact else 1e-4)
    for got, want in zip(self_conditioned_steps(eng.model, 3), self_conditioned_steps(ref.model, 3), strict=True):
        _close(got, want, 0 if exact else 1e-3)


def _close(got: torch.Tensor, want: torch.Tensor, rel: float) -> None:
    """Exact (rel 0), or within `rel` of the largest value (fp32 summation order)."""
    if rel == 0:
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        return
    assert got.shape == want.shape and not torch.equal(got, torch.zeros_like(got))
    assert float((got - want).abs().max()) <= rel * float(want.abs().max())


def test_gguf_dequantized_on_load_and_requantized(tiny):
    src, root = tiny
    path = W.write_gguf(src, root / "q8.gguf", "Q8_0")
    bf16 = Engine.from_pretrained(path, device="cpu", dtype="float32", weights="bf16")
    assert bf16.weights == "bf16" and not any(isinstance(m, QuantWeight) for m in bf16.model.modules())
    packed = Engine.from_pretrained(path, device="cpu", dtype="float32")
    _close(logits(packed), logits(bf16), 1e-4)  # the same values; summation order (native row-by-row products)
    int4 = Engine.from_pretrained(path, device="cpu", dtype="float32", weights="int4")
    assert int4.model.layers[0].moe.down_proj.fmt == "int4"


def test_split_files_and_directory_load_the_same_model(tiny):
    src, root = tiny
    one = W.write_gguf(src, root / "one.gguf")
    (root / "split").mkdir()
    first = W.write_gguf(src, root / "split" / "model.gguf", split_max_tensors=20)
    assert first.name.endswith("-00001-of-00004.gguf")
    want = logits(Engine.from_pretrained(one, device="cpu", dtype="float32"))
    for path in (first, root / "split"):
        torch.testing.assert_close(logits(Engine.from_pretrained(path, device="cpu", dtype="float32")), want,
                                   rtol=0, atol=0)
    sorted((root / "split").glob("*.gguf"))[-1].unlink()
    with pytest.raises(G.GGUFError, match="split parts missing: model-00004-of-00004.gguf"):
        Engine.from_pretrained(first, device="cpu", dtype="float32")


def test_metadata_sampler_defaults_and_defaulted_keys(tiny):
    src, root = tiny
    path = W.write_gguf(src, root / "eb.gguf", sampler={"eb_max_steps": 12, "eb_entropy_bound": 0.25})
    info = G.open_gguf(path)
    cfg = G.checkpoint_config(info)
    assert cfg.canvas_length == 16 and cfg.sampler.max_denoising_steps == 12 and cfg.sampler.entropy_bound == 0.25
    assert cfg.sources["max_denoising_steps"] == G.SOURCE and "t_min" not in cfg.sources
    assert "diffusion.eb_t_min" in info.defaulted and "diffusion.eb_max_steps" not in info.defaulted
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32", sampler={"steps": 3})
    assert eng.settings_in_force()["entropy_bound"] == {"value": 0.25, "source": G.SOURCE}
    assert eng.settings_in_force()["steps"]["source"] == "setting"


def _rewrite(src, dst, monkeypatch, drop=(), rename=None, keys=None):
    """write_gguf with tensors dropped / renamed, or metadata keys replaced (None: removed)."""
    import gguf

    real_add_tensor, real_add = gguf.GGUFWriter.add_tensor, gguf.GGUFWriter.add_key_value

    def add_tensor(self, name, *a, **kw):
        if name in drop:
            return
        real_add_tensor(self, (rename or {}).get(name, name), *a, **kw)

    def add_key_value(self, key, val, *a, **kw):
        if keys and key in keys:
            if keys[key] is None:
                return
            val = keys[key]
        real_add(self, key, val, *a, **kw)

    monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", add_tensor)
    monkeypatch.setattr(gguf.GGUFWriter, "add_key_value", add_key_value)
    try:
        return W.write_gguf(src, dst)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("change,message", [
    (dict(keys={"diffusion.canvas_length": None}), "required key 'diffusion.canvas_length' is missing"),
    (dict(keys={"general.architecture": "gemma4"}), "architecture 'gemma4' is not 'diffusion-gemma'"),
    (dict(drop=("blk.1.ffn_down_exps.scale",)), r"missing \['blk.1.ffn_down_exps.scale'\]"),
    (dict(rename={"blk.0.attn_k.weight": "blk.0.attn_kv.weight"}),
     r"missing \['blk.0.attn_k.weight'\]; unknown \['blk.0.attn_kv.weight'\]"),
])
def test_mismatched_file_is_refused_by_name(tiny, monkeypatch, change, message):
    src, root = tiny
    path = _rewrite(src, root / f"bad{abs(hash(message))}.gguf", monkeypatch, **change)
    with pytest.raises(G.GGUFError, match=message):
        Engine.from_pretrained(path, device="cpu", dtype="float32")


def test_unsupported_quant_type_is_refused_by_name(tiny, monkeypatch):
    src, root = tiny
    real_pack = W.pack

    def pack(w, qtype):  # IQ4_NL blocks (18 bytes per 32 values) of random bytes: gguf-py cannot quantize to it
        if qtype == "IQ4_NL":
            return np.random.default_rng(0).integers(0, 256, (*w.shape[:-1], w.shape[-1] // 32 * 18), np.uint8)
        return real_pack(w, qtype)

    monkeypatch.setattr(W, "pack", pack)
    rule = lambda n, s, nl, v: "IQ4_NL" if n == "blk.0.ffn_gate.weight" else W.q4_k_m_type(n, s, nl, v)  # noqa
    path = W.write_gguf(src, root / "iq.gguf", rule)
    with pytest.raises(G.GGUFError, match=r"ggml types IQ4_NL are not supported .*tensors: blk.0.ffn_gate.weight"):
        Engine.from_pretrained(path, device="cpu", dtype="float32")


@pytest.mark.parametrize("damage", ["truncated", "header", "empty"])
def test_corrupted_file_gets_a_clear_error(tiny, damage):
    src, root = tiny
    good = W.write_gguf(src, root / f"good_{damage}.gguf")
    data = good.read_bytes()
    bad = root / f"{damage}.gguf"
    bad.write_bytes({"truncated": data[: len(data) - 5000], "header": data[:4] + bytes(range(256)) * 8,
                     "empty": b""}[damage])
    want = {"truncated": r"truncated: tensor \S+ needs bytes [\d,]+\.\.[\d,]+, the file has [\d,]+$",
            "header": r"GGUF version 50462976 is not supported", "empty": r"truncated header: 0 bytes"}[damage]
    with pytest.raises(G.GGUFError, match=f"{bad.name}: {want}"):
        Engine.from_pretrained(bad, device="cpu", dtype="float32")


def test_check_names_the_format_and_fills_with_the_tokenizer_beside_the_file(tiny):
    from engine.tools.check import run_check

    src, root = tiny
    (root / "with_tok").mkdir()
    path = W.write_gguf(src, root / "with_tok" / "model-Q4_K_M.gguf")
    W.sidecar(src, root / "with_tok")
    out = run_check(str(root / "with_tok"), device="cpu", dtype="float32")
    assert out["ok"], out.get("error")
    ck = out["checkpoint"]
    assert ck["format"] == "gguf" and ck["files"] == [str(path)]
    assert ck["tensor_types"]["Q4_K"]["tensors"] == 20 and ck["tensor_types"]["Q6_K"]["bytes"] > 0
    assert ck["tokenizer"].endswith("tokenizer.json (beside the checkpoint)") and out["weights"] == "gguf"
    assert "diffusion.eb_max_steps" in ck["defaulted_keys"] and out["memory"]["bytes"]["gguf"] > 0
    assert isinstance(out["fill"], str) and out["steps"] >= 1
    bare = run_check(str(W.write_gguf(src, root / "bare.gguf")), device="cpu", dtype="float32")
    assert bare["ok"] and bare["checkpoint"]["tokenizer"] == G.TOKENIZER_SOURCE  # byte-level, rebuilt (gpt2)


def test_check_names_a_tokenizer_kind_not_rebuilt(tiny, monkeypatch):
    from engine.tools.check import run_check

    src, root = tiny
    path = _rewrite(src, root / "llama_bpe.gguf", monkeypatch, keys={"tokenizer.ggml.pre": "llama-bpe"})
    out = run_check(str(path), device="cpu", dtype="float32")
    assert not out["ok"] and "no tokenizer.json" in out["error"]
    assert "'gpt2' (pre 'llama-bpe') is not rebuilt" in out["checkpoint"]["tokenizer"]
    assert "put the model's HF tokenizer.json" in out["checkpoint"]["tokenizer"]


CORPUS = [
    *__import__("engine.testing.tiny", fromlist=["SAMPLE_CODE"]).SAMPLE_CODE,
    "def größe(x):\n    return x  # Größe, naïve café\n",
    "// 日本語のコメント\nconst 名前 = \"値\";\n",
    "# Комментарий по-русски\nprint('привет, мир')\n",
    "fn main() { println!(\"你好, 世界 🌍\"); }\n\n\n\t\tx  =  1\n",
    "if (a && b) {\r\n    return \"ñandú\";\r\n}\n",
    "  leading spaces and trailing   \n<bos>mixed <|turn>user\nspecial<turn|> tokens\n",
]


def test_tokenizer_rebuilt_from_gguf_metadata_matches_the_hf_tokenizer(tiny):
    from tokenizers import Tokenizer

    from engine.formats.gguf_tokenizer import tokenizer_fields
    from engine.testing.published import gemma_style_tokenizer

    src, root = tiny
    hf_dir = root / "gemma_tok"
    hf_dir.mkdir()
    gemma_style_tokenizer().save(str(hf_dir / "tokenizer.json"))
    for f in src.iterdir():
        if f.name != "tokenizer.json":
            (hf_dir / f.name).write_bytes(f.read_bytes())
    assert tokenizer_fields(hf_dir / "tokenizer.json")["tokenizer.ggml.model"] == "gemma4"
    path = W.write_gguf(hf_dir, root / "tok.gguf")
    rebuilt, hf = G.file_tokenizer(path), Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    for text in CORPUS:
        want = hf.encode(text, add_special_tokens=False).ids
        assert rebuilt.encode(text, add_special_tokens=False).ids == want, text
        assert rebuilt.decode(want, skip_special_tokens=False) == hf.decode(want, skip_special_tokens=False)
    # a byte-level BPE (the tiny test tokenizer) is written as llama.cpp's "gpt2" and rebuilt as ByteLevel BPE
    bytelevel, hf = G.file_tokenizer(W.write_gguf(src, root / "bytelevel.gguf")), Tokenizer.from_file(
        str(src / "tokenizer.json"))
    for text in CORPUS:
        assert bytelevel.encode(text).ids == hf.encode(text).ids, text
