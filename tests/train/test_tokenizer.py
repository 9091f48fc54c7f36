"""Byte-level BPE: fixed special ids and a lossless round trip for any UTF-8 text."""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.tokens import SPECIAL_TOKENS
from engine.train.build_tokenizer import build
from engine.train.corpus import SourceFile

DEFAULT = Path(__file__).resolve().parents[2] / "engine" / "default_model" / "tokenizer.json"


def test_build_keeps_special_ids(tmp_path):
    (tmp_path / "a.py").write_text("def f(x):\n    return x + 1\n" * 20)
    files = [SourceFile(str(tmp_path), "a.py", 1, "0")]
    tok = build(files, vocab_size=300)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert tok.token_to_id("<pad>") == 0 and tok.token_to_id("<eos>") == 1 and tok.token_to_id("<bos>") == 2


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_round_trip_any_text(tok, text):
    assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_round_trip_shipped_tokenizer(text):
    from tokenizers import Tokenizer

    if not DEFAULT.exists():
        return
    t = Tokenizer.from_file(str(DEFAULT))
    assert t.decode(t.encode(text).ids, skip_special_tokens=False) == text
    assert t.token_to_id("<pad>") == 0 and t.token_to_id("<eos>") == 1 and t.token_to_id("<bos>") == 2
