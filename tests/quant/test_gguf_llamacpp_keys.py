"""The GGUF files this project writes carry the metadata llama.cpp's converter writes for the same checkpoint, and
what llama.cpp's loader reads: read back with the gguf package's own reader (every field parsed, typed as the
gguf constants say), the pre-tokenizer spelled `gpt-2` (and `gpt2` still read), a mask token id, and
`general.file_type` naming the mix (Q8_0 = 7, Q4_K_M = 15, F32 = 0)."""

from __future__ import annotations

import pytest
from gguf_checkpoints import GGUF_SHAPE
from test_gguf import _rewrite

from engine.formats import gguf as G
from engine.formats import gguf_write as W
from engine.formats.gguf_write import write_gguf, write_shipped
from engine.testing.published import gemma_style_tokenizer
from engine.testing.tiny import build_tiny_checkpoint

A = "diffusion-gemma."
# The keys llama.cpp's converter writes for a DiffusionGemma checkpoint, read from ggml-org/llama.cpp (PR #24423's
# tree, conversion/ package):
CONVERTER_KEYS = {
    # gguf-py GGUFWriter(arch=...) and ModelBase.prepare_metadata (conversion/base.py)
    "general.architecture", "general.quantization_version",
    # TextModel.set_gguf_parameters (conversion/base.py)
    A + "block_count", A + "context_length", A + "embedding_length", A + "feed_forward_length",
    A + "attention.head_count", A + "attention.head_count_kv", A + "rope.freq_base", A + "rope.freq_base_swa",
    A + "attention.layer_norm_rms_epsilon", A + "expert_count", A + "expert_used_count", A + "attention.key_length",
    A + "attention.value_length", "general.file_type",
    # Gemma3Model.set_gguf_parameters (conversion/gemma.py)
    A + "final_logit_softcapping", A + "attention.sliding_window",
    # Gemma4Model.set_gguf_parameters (conversion/gemma.py)
    A + "attention.shared_kv_layers", A + "embedding_length_per_layer_input", A + "attention.sliding_window_pattern",
    A + "attention.key_length_swa", A + "attention.value_length_swa", A + "expert_feed_forward_length",
    A + "rope.dimension_count", A + "rope.dimension_count_swa",
    # DiffusionGemmaModel.set_gguf_parameters (conversion/diffusion_gemma.py): eb_* only for the keys that
    # generation_config.json has (the shipped model's has all six)
    A + "attention.causal", "diffusion.canvas_length", "diffusion.eb_max_steps", "diffusion.eb_t_min",
    "diffusion.eb_t_max", "diffusion.eb_entropy_bound", "diffusion.eb_stability_threshold",
    "diffusion.eb_confidence_threshold",
}
# TextModel._set_vocab_gpt2 (conversion/base.py), the byte-level BPE path, + gguf.SpecialVocab(load_merges=True)
# .add_to_gguf for the ids config.json gives
GPT2_VOCAB_KEYS = {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                   "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                   "tokenizer.ggml.padding_token_id"}
# Gemma4Model.set_vocab (conversion/gemma.py): LlamaHfVocab tokens/scores/types, SpecialVocab (merges and the
# special ids the tokenizer names, `<mask>` included), add_space_prefix False, add_bos_token True
GEMMA4_VOCAB_KEYS = {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                     "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
                     "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                     "tokenizer.ggml.padding_token_id", "tokenizer.ggml.mask_token_id",
                     "tokenizer.ggml.add_space_prefix", "tokenizer.ggml.add_bos_token"}
# Written beyond the converter for a byte-level vocabulary: llama-diffusion-cli asserts a mask id exists
# (examples/diffusion/diffusion-cli.cpp), and the shipped model's prompts start with <bos>.
OURS_ONLY_GPT2 = {"tokenizer.ggml.mask_token_id", "tokenizer.ggml.add_bos_token"}


def _read(path):
    """Every field through the gguf package's reader: name -> (value, gguf value types)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    return {name: (f.contents(), [t.name for t in f.types]) for name, f in reader.fields.items()
            if not name.startswith("GGUF.")}


def test_shipped_model_file_has_the_converters_keys_and_llamacpps_spelling(tmp_path):
    path = write_shipped(tmp_path, rule="Q8_0")
    fields = _read(path)
    assert set(fields) == CONVERTER_KEYS | GPT2_VOCAB_KEYS | OURS_ONLY_GPT2, (
        set(fields) ^ (CONVERTER_KEYS | GPT2_VOCAB_KEYS | OURS_ONLY_GPT2))
    assert fields["tokenizer.ggml.pre"] == ("gpt-2", ["STRING"])  # src/llama-vocab.cpp's name for the GPT-2 split
    assert fields["general.file_type"] == (7, ["UINT32"])  # LLAMA_FTYPE_MOSTLY_Q8_0
    assert fields["general.quantization_version"] == (2, ["UINT32"])
    assert fields["tokenizer.ggml.mask_token_id"] == (0, ["UINT32"])  # no <mask> in this vocabulary: the pad id
    assert fields[A + "attention.sliding_window_pattern"][1] == ["ARRAY", "BOOL"]
    assert fields[A + "attention.head_count_kv"][1][0] == "ARRAY"
    # and the engine reads it back with its tokenizer (the gpt-2 name is what it rebuilds)
    assert G.file_tokenizer(path) is not None


@pytest.mark.parametrize("rule,ftype", [("q4_k_m", 15), ("F32", 0), ("BF16", 32), ("Q5_K", 16)])
def test_gemma_tokenizer_file_has_the_converters_keys_and_its_file_type(tmp_path, rule, ftype):
    src = build_tiny_checkpoint(tmp_path / "hf", GGUF_SHAPE, canvas_length=16, seed=1)
    gemma_style_tokenizer().save(str(src / "tokenizer.json"))
    path = write_gguf(src, tmp_path / "m.gguf", W.q4_k_m_type if rule == "q4_k_m" else rule)
    fields = _read(path)
    # the tiny checkpoint has no generation_config sampler keys, so no diffusion.eb_*
    want = {k for k in CONVERTER_KEYS if not k.startswith("diffusion.eb_")} | GEMMA4_VOCAB_KEYS
    assert set(fields) == want, set(fields) ^ want
    assert fields["general.file_type"] == (ftype, ["UINT32"])
    tokens = fields["tokenizer.ggml.tokens"][0]
    assert tokens[fields["tokenizer.ggml.mask_token_id"][0]] == "<mask>"
    assert fields["tokenizer.ggml.model"][0] == "gemma4"


@pytest.mark.parametrize("pre", ["gpt-2", "gpt2"])
def test_both_spellings_of_the_gpt2_pre_tokenizer_are_read(tmp_path, monkeypatch, pre):
    src = build_tiny_checkpoint(tmp_path / "hf", GGUF_SHAPE, canvas_length=16, seed=1)
    path = _rewrite(src, tmp_path / "pre.gguf", monkeypatch, keys={"tokenizer.ggml.pre": pre})
    assert _read(path)["tokenizer.ggml.pre"][0] == pre
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(src / "tokenizer.json"))
    text = "def add(a, b):\n    return a + b  # Größe\n"
    assert G.file_tokenizer(path).encode(text).ids == hf.encode(text).ids
