"""A fill's confidence (issue 25): the mean temperature-1 probability of the tokens the engine kept, reported by
every infill, on both denoising loops, and bounded."""

from __future__ import annotations

import pytest
import torch

from engine.engine import Engine
from engine.seam import fill_confidence


@pytest.fixture(scope="module")
def tiny_engine(tiny_mixed):
    return Engine.from_pretrained(tiny_mixed, device="cpu", dtype="float32")


def test_fill_confidence_is_the_mean_and_unknown_without_tokens():
    assert fill_confidence([0.5, 1.0, 0.0]) == pytest.approx(0.5)
    assert fill_confidence([]) is None


@pytest.mark.parametrize("reference", [False, True], ids=["engine-loop", "reference-loop"])
def test_every_fill_reports_its_tokens_probabilities_and_their_mean(tiny_engine, reference):
    torch.manual_seed(0)
    res = tiny_engine.infill([5, 6, 7, 8], canvas_length=16, steps=4, reference_compatible=reference)
    assert not res.cancelled
    # one probability per kept token, plus the end-of-canvas token when the fill ended there
    assert len(res.ids) <= len(res.token_probs) <= len(res.ids) + 1
    assert all(0.0 < p <= 1.0 for p in res.token_probs)
    assert res.confidence == pytest.approx(sum(res.token_probs) / len(res.token_probs))


def test_the_probability_is_at_temperature_one_not_the_sharpened_sampling_one(tiny_engine):
    """The last steps sample at t_min (0.05 on the shipped model), which puts ~1.0 on every argmax: a confidence
    read there would say nothing. A random tiny model spreads its mass: well below 1."""
    res = tiny_engine.infill([5, 6, 7, 8], canvas_length=16, steps=4)
    assert res.confidence < 0.9
