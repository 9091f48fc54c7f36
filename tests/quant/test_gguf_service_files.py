"""engine.formats.hf_files: a GGUF's config written back as config.json / generation_config.json reads back
(engine.config.load_config) into the same shape, sampler and end ids the engine loaded from the file's metadata."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.config import load_config
from engine.formats import gguf
from engine.formats.gguf_write import write_gguf
from engine.formats.hf_files import config_json, generation_config_json
from engine.testing.tiny import build_tiny_checkpoint


@pytest.mark.parametrize("shape", ["mixed", "sliding_heavy", "mha_full"])
def test_a_gguf_config_round_trips_through_the_files_clients_read(tmp_path, shape):
    src = build_tiny_checkpoint(tmp_path / "hf", shape, canvas_length=16, seed=2, with_tokenizer=False)
    path = write_gguf(src, tmp_path / "m.gguf", "F32")
    loaded = gguf.checkpoint_config(gguf.open_gguf(path))
    out = tmp_path / "client"
    out.mkdir()
    (out / "config.json").write_bytes(config_json(loaded))
    (out / "generation_config.json").write_bytes(generation_config_json(loaded))
    back = load_config(out)
    assert back.text == loaded.text and back.sampler == loaded.sampler
    assert back.eos_token_ids == loaded.eos_token_ids and back.canvas_length == loaded.canvas_length
    # and both equal what the safetensors checkpoint itself declares (GGUF stores the norm epsilon as float32)
    hf = load_config(src).text
    assert replace(back.text, rms_norm_eps=hf.rms_norm_eps) == hf
    assert back.text.rms_norm_eps == pytest.approx(hf.rms_norm_eps, rel=1e-6)


@pytest.mark.parametrize(("variant", "says"), [("exact_gelu", "hidden_activation='gelu'"),
                                             ("untied", "tie_word_embeddings=False"),
                                             ("attention_bias", "attention_bias=True")])
def test_a_config_gguf_cannot_express_is_refused_by_the_writer(tmp_path, variant, says):
    src = build_tiny_checkpoint(tmp_path / "hf", variant, canvas_length=16, seed=2, with_tokenizer=False)
    with pytest.raises(ValueError, match=says):
        write_gguf(src, tmp_path / "m.gguf", "F32")
