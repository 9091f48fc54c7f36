"""Training smoke runs on a tiny config: finite, decreasing loss; checkpoints resume; export loads in transformers."""

import dataclasses
import json

import pytest
import torch

from engine.tokens import InfillFormat
from engine.train.corpus import SourceFile
from engine.train.data import DataConfig, HoleDataset
from engine.train.model_config import SHAPES
from engine.train.objective import ObjectiveConfig, corrupt, loss_on_batch
from engine.train.train import TrainConfig, build_model

from .conftest import SAMPLE


def _setup(tmp_path, tok, **obj):
    (tmp_path / "m.py").write_text(SAMPLE)
    files = [SourceFile(str(tmp_path), "m.py", len(SAMPLE), "x")]
    data = DataConfig(context_tokens=40, suffix_tokens=10, canvas_lengths=(16,), canvas_weights=(1.0,), batch_size=4)
    cfg = TrainConfig(
        run_dir=str(tmp_path / "run"),
        tokenizer_dir=str(tmp_path),
        shape=dataclasses.replace(SHAPES["tiny"], vocab_size=tok.get_vocab_size()),
        data=data,
        objective=ObjectiveConfig(**obj),
        lr=3e-3,
        warmup_steps=0,
    )
    ds = HoleDataset(files, tok, InfillFormat(canvas_lengths=(16,)), data, seed=0)
    return cfg, ds


def test_suffix_reaches_the_canvas_through_every_layer(tmp_path):
    data = DataConfig(context_tokens=600, suffix_tokens=100)
    with pytest.raises(ValueError, match="sliding_window"):
        TrainConfig(run_dir=str(tmp_path), tokenizer_dir=str(tmp_path), data=data)


def test_corrupt_is_uniform_noise_with_explicit_generator():
    canvas = torch.full((64, 16), 7)
    a = corrupt(canvas, 100, 0.5, torch.Generator().manual_seed(0))
    b = corrupt(canvas, 100, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and 0.4 < (a != 7).float().mean() < 0.8 and a.max() < 100


def test_loss_finite_and_decreases_on_repeated_batch(tmp_path, tok):
    cfg, ds = _setup(tmp_path, tok, noise_draws=2, self_conditioning_prob=0.5, ar_weight=0.5)
    model = build_model(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    b = ds.batch(0)
    losses = []
    for _ in range(4):
        loss, stats = loss_on_batch(
            model, b.context, b.attention_mask, b.canvas, cfg.objective, torch.Generator().manual_seed(0)
        )
        assert torch.isfinite(loss) and "ar_loss" in stats
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_train_resume_and_export(tmp_path, tok):
    from transformers import DiffusionGemmaForBlockDiffusion

    from engine.train.export import export
    from engine.train.train import train

    cfg, _ = _setup(tmp_path, tok, noise_draws=2)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "files": [
                    {"root": str(tmp_path), "path": p, "size": len(SAMPLE), "sha256": "x"} for p in ("m.py", "b.py")
                ]
            }
        )
    )
    (tmp_path / "b.py").write_text(SAMPLE)  # b.py is held out by the hash rule, m.py is not
    cfg = dataclasses.replace(cfg, total_steps=10)
    from engine.train.corpus import is_held_out

    assert is_held_out("b.py") and not is_held_out("m.py")
    r1 = train(cfg, minutes=0.02, quiet=True)
    assert r1["step"] >= 1 and (tmp_path / "run" / "ckpt" / "model.safetensors").exists()
    r2 = train(cfg, minutes=0.02, quiet=True)
    assert r2["step"] > r1["step"]
    out = export(tmp_path / "run", tmp_path / "exported")
    model = DiffusionGemmaForBlockDiffusion.from_pretrained(out).eval()
    assert json.loads((out / "infill.json").read_text())["layout"] == "suffix_first"
    model.config.canvas_length = 16
    with torch.no_grad():
        res = model.generate(input_ids=torch.tensor([[2, 5, 10, 11, 3, 12, 4]]), max_new_tokens=16)
    assert res.sequences.shape[1] == 7 + 16
