"""Shared fixtures for the training tests: offline, a small BPE tokenizer trained on a few Python files."""

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

SAMPLE = '''import os


def walk(root, depth=0):
    """Yield (path, depth) pairs."""
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            yield from walk(path, depth + 1)
        else:
            yield path, depth


class Counter:
    def __init__(self, start=0):
        self.value = start

    def bump(self, by=1):
        self.value += by
        return self.value
'''


@pytest.fixture(scope="session")
def tok():
    from engine.tokens import train_bpe

    return train_bpe([SAMPLE] * 8 + ["café 日本語 😀 ünïcode"], vocab_size=400)
