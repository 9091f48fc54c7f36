"""Tiny random checkpoints shared by the engine tests (built once per session with transformers)."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engine.testing.tiny import TINY_VARIANTS, build_tiny_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("tiny")
    return {name: build_tiny_checkpoint(root / name, name, canvas_length=16, seed=i)
            for i, name in enumerate(TINY_VARIANTS)}


@pytest.fixture(scope="session")
def tiny_mixed(tiny_checkpoints):
    return tiny_checkpoints["mixed"]
