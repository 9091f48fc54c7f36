"""Dream and LLaDA GGUFs laid out as llama.cpp's converter writes them read back as the HF checkpoint: every tensor
under its HF name (LLaDA's q/k rows un-permuted), F32 exactly and Q8_0 as gguf-py dequantizes it, the config.json
dict the published checkpoint carries; and files that differ refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.formats.gguf import GGUFError
from engine.formats.gguf_mdm import read_mdm
from engine.testing.gguf_mdm_write import permute, tiny_dream, tiny_llada, write_mdm_gguf

BUILD = {"dream": tiny_dream, "dream_tied": lambda: tiny_dream(tied=True), "llada": tiny_llada}


@pytest.mark.parametrize("kind", list(BUILD))
def test_f32_file_reads_back_as_the_hf_checkpoint(tmp_path, kind):
    cfg, tensors = BUILD[kind]()
    arch, got_cfg, got = read_mdm(write_mdm_gguf(cfg, tensors, tmp_path / "m.gguf"))
    assert arch == kind.removesuffix("_tied")
    assert got_cfg == cfg
    assert set(got) == set(tensors)
    for name, t in tensors.items():
        assert torch.equal(got[name], t), name


def test_llada_file_holds_permuted_q_k_rows_and_reads_them_back(tmp_path):
    from gguf import GGUFReader

    cfg, tensors = tiny_llada()
    path = write_mdm_gguf(cfg, tensors, tmp_path / "l.gguf")
    stored = {t.name: np.asarray(t.data) for t in GGUFReader(path).tensors}
    q = tensors["model.transformer.blocks.0.q_proj.weight"]
    assert np.array_equal(stored["blk.0.attn_q.weight"], permute(q, cfg["n_heads"]).numpy())
    assert not np.array_equal(stored["blk.0.attn_q.weight"], q.numpy())
    assert np.array_equal(stored["blk.1.ffn_gate.weight"], tensors["model.transformer.blocks.1.ff_proj.weight"].numpy())
    assert torch.equal(read_mdm(path)[2]["model.transformer.blocks.0.q_proj.weight"], q)


@pytest.mark.parametrize("kind", ["dream", "llada"])
def test_q8_0_file_reads_back_as_gguf_py_dequantizes_it(tmp_path, kind):
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize

    cfg, tensors = BUILD[kind]()
    path = write_mdm_gguf(cfg, tensors, tmp_path / "q.gguf", "Q8_0")
    _, _, got = read_mdm(path)
    reader = {t.name: t for t in GGUFReader(path).tensors}
    t = reader["blk.1.ffn_down.weight"]
    assert t.tensor_type.name == "Q8_0"
    want = dequantize(np.asarray(t.data), GGMLQuantizationType.Q8_0)
    hf = "model.layers.1.mlp.down_proj.weight" if kind == "dream" else "model.transformer.blocks.1.ff_out.weight"
    assert np.array_equal(got[hf].numpy(), want)
    for name, w in tensors.items():  # every weight within a Q8_0 step of the original
        assert float((got[name] - w).abs().max()) <= float(w.abs().max()) / 127 + 1e-7, name


def _broken(tmp_path, change):
    cfg, tensors = tiny_dream()
    import gguf

    real = gguf.GGUFWriter.add_key_value
    real_tensor = gguf.GGUFWriter.add_tensor

    def add_key_value(self, key, val, *a, **kw):
        if key in change.get("keys", {}):
            val = change["keys"][key]
        real(self, key, val, *a, **kw)

    def add_tensor(self, name, *a, **kw):
        if name not in change.get("drop", ()):
            real_tensor(self, change.get("rename", {}).get(name, name), *a, **kw)

    gguf.GGUFWriter.add_key_value, gguf.GGUFWriter.add_tensor = add_key_value, add_tensor
    try:
        return write_mdm_gguf(cfg, tensors, tmp_path / "bad.gguf")
    finally:
        gguf.GGUFWriter.add_key_value, gguf.GGUFWriter.add_tensor = real, real_tensor


@pytest.mark.parametrize("change,message", [
    ({"keys": {"general.architecture": "qwen2"}}, "architecture 'qwen2' is not one of dream, llada"),
    ({"keys": {"dream.attention.causal": True}}, "dream.attention.causal is not false"),
    ({"drop": ("blk.1.attn_k.bias",)}, r"missing \['blk.1.attn_k.bias'\]"),
    ({"rename": {"blk.0.ffn_up.weight": "blk.0.ffn_up_exps.weight"}},
     r"missing \['blk.0.ffn_up.weight'\]; unknown \['blk.0.ffn_up_exps.weight'\]"),
])
def test_a_file_that_differs_is_refused_by_name(tmp_path, change, message):
    path = _broken(tmp_path, change)
    with pytest.raises(GGUFError, match=message):
        read_mdm(path)
