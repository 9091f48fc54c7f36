"""The shipped model's tokenizer as stock tools read it: transformers' AutoTokenizer on engine/default_model (what
vLLM does when it serves the folder) gives the engine's ids and decodes a multi-line fill with real spaces and
newlines, not byte-level `Ġ`/`Ċ`; the engine's own reading of tokenizer.json is unchanged."""

from __future__ import annotations

import json

import pytest

from engine.engine import Engine, default_model_path

MODEL = default_model_path()
PREFIX = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
SUFFIX = "\n\n    def pop(self):\n        return self.items.pop()\n"
# A fill as an editor shows it: indentation, a blank line, a tab, double spaces, a trailing newline.
MULTI_LINE = "        self.items.append(item)\n\n        if  len(self.items) > 3:\n\t    return None  # full .\n"


@pytest.fixture(scope="module")
def auto_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MODEL)


@pytest.fixture(scope="module")
def engine():
    return Engine.from_pretrained(MODEL, device="cpu", dtype="float32")


def test_the_folder_names_the_fast_tokenizer_and_its_special_tokens_are_tokenizer_json_s(auto_tokenizer):
    added = {t["content"]: t["id"] for t in json.loads((MODEL / "tokenizer.json").read_text())["added_tokens"]}
    text = json.loads((MODEL / "config.json").read_text())["text_config"]
    assert type(auto_tokenizer).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")
    assert (auto_tokenizer.bos_token, auto_tokenizer.eos_token, auto_tokenizer.pad_token) == ("<bos>", "<eos>", "<pad>")
    assert auto_tokenizer.unk_token is None and "<unk>" not in added  # a byte-level BPE: every byte has a token
    assert auto_tokenizer.bos_token_id == added["<bos>"] == text["bos_token_id"]
    assert auto_tokenizer.eos_token_id == added["<eos>"] == text["eos_token_id"]
    assert auto_tokenizer.pad_token_id == added["<pad>"] == text["pad_token_id"]


def test_a_multi_line_text_round_trips_with_the_engine_s_ids(auto_tokenizer, engine):
    ids = engine.encode(MULTI_LINE)
    assert auto_tokenizer.encode(MULTI_LINE, add_special_tokens=False) == ids
    assert auto_tokenizer(MULTI_LINE)["input_ids"] == ids  # no bos/eos added behind the caller's back
    for skip in (True, False):
        assert auto_tokenizer.decode(ids, skip_special_tokens=skip) == MULTI_LINE


def test_an_engine_fill_decodes_the_same_in_transformers(auto_tokenizer, engine):
    fills = [engine.infill_text(PREFIX, SUFFIX, canvas_length=64, seed=seed) for seed in range(4)]
    multi = [f for f in fills if "\n" in f.text.strip("\n")]
    assert multi, [f.text for f in fills]
    for fill in fills:
        text = auto_tokenizer.decode(fill.ids, skip_special_tokens=True)
        assert text == fill.text == engine.decode(fill.ids)
        assert "Ġ" not in text and "Ċ" not in text


def test_the_engine_still_reads_tokenizer_json_and_the_fim_format(engine):
    assert engine.tokenizer_source.startswith(str(MODEL / "tokenizer.json"))
    assert type(engine.prompt_format).__name__ == "InfillFormat"  # no chat template crept in with the config


def test_a_retrained_export_writes_the_same_tokenizer_config():
    from engine.train.export import TOKENIZER_CONFIG

    assert json.loads((MODEL / "tokenizer_config.json").read_text()) == TOKENIZER_CONFIG
