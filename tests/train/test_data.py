"""Examples and batches: suffix-first contexts cut at line boundaries, canvas = middle + eos + pads."""

import pytest
import torch

from engine.tokens import InfillFormat
from engine.train.corpus import SourceFile
from engine.train.data import DataConfig, HoleDataset, canvas_ids, cut_prefix, cut_suffix, make_example
from engine.train.holes import Hole

from .conftest import SAMPLE

FMT = InfillFormat()


def test_cut_prefix_starts_at_a_line(tok):
    ids = cut_prefix(tok, SAMPLE, 30)
    text = tok.decode(ids)
    assert len(ids) <= 30 and SAMPLE.endswith(text) and SAMPLE[: len(SAMPLE) - len(text)].endswith("\n")


def test_cut_suffix_ends_at_a_line(tok):
    ids = cut_suffix(tok, SAMPLE, 25)
    text = tok.decode(ids)
    assert len(ids) <= 25 and SAMPLE.startswith(text) and text.endswith("\n")


def test_example_layout(tok):
    start = SAMPLE.index("self.value = start")
    hole = Hole(start, start + len("self.value = start"), "statement")
    ex = make_example(tok, FMT, SAMPLE, hole, DataConfig(context_tokens=64, suffix_tokens=16))
    assert len(ex.context) <= 64
    assert ex.context[:2] == [FMT.bos_id, FMT.fim_suffix_id] and ex.context[-1] == FMT.fim_middle_id
    k = ex.context.index(FMT.fim_prefix_id)
    assert tok.decode(ex.context[2:k]).startswith("\n\n    def bump")
    assert tok.decode(ex.context[k + 1 : -1]).endswith("def __init__(self, start=0):\n        ")
    assert tok.decode(ex.middle) == "self.value = start"


def test_canvas_ids():
    assert canvas_ids([7, 8], 5, FMT) == [7, 8, FMT.eos_id, FMT.pad_id, FMT.pad_id]
    with pytest.raises(ValueError):
        canvas_ids([7] * 16, 16, FMT)


def test_batch_shapes_and_determinism(tok, tmp_path):
    (tmp_path / "m.py").write_text(SAMPLE)
    files = [SourceFile(str(tmp_path), "m.py", len(SAMPLE), "x")]
    cfg = DataConfig(context_tokens=48, suffix_tokens=12, canvas_lengths=(16, 32), canvas_weights=(1, 1), batch_size=5)
    ds = HoleDataset(files, tok, FMT, cfg, seed=1)
    b = ds.batch(3)
    assert b.context.shape[0] == 5 and b.context.shape[1] <= 48 and b.canvas.shape[1] in (16, 32)
    assert torch.equal(b.context, HoleDataset(files, tok, FMT, cfg, seed=1).batch(3).context)
    for row, mask, canvas in zip(b.context, b.attention_mask, b.canvas, strict=True):
        n = int(mask.sum())
        assert (row[: len(row) - n] == FMT.pad_id).all() and row[len(row) - n] == FMT.bos_id  # left padding
        ids = canvas.tolist()
        e = ids.index(FMT.eos_id)
        assert e >= 1 and all(i == FMT.pad_id for i in ids[e + 1 :])


def test_bad_config():
    with pytest.raises(ValueError):
        DataConfig(context_tokens=10, suffix_tokens=8)
    with pytest.raises(ValueError):
        DataConfig(kind_weights={"nope": 1.0})
