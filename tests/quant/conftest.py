"""Session fixtures of the quantization tests: tiny random checkpoints and a compressed-tensors FP8 one."""

from __future__ import annotations

from pathlib import Path

import pytest
from quant_checkpoints import write_fp8_checkpoint

from engine.testing.tiny import build_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_ckpts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quant_tiny")
    return {name: build_tiny_checkpoint(root / name, name, canvas_length=16, seed=i)
            for i, name in enumerate(("mixed", "sliding_heavy"))}


@pytest.fixture(scope="session")
def fp8_ckpt(tiny_ckpts, tmp_path_factory) -> Path:
    return write_fp8_checkpoint(tiny_ckpts["mixed"], tmp_path_factory.mktemp("fp8") / "mixed_fp8")
