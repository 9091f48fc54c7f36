"""bench.vllm_standin's stand-in does with a request what vLLM 0.33 does (REFERENCE.md §7): without `vllm_xargs`
every canvas is the served one, cut at `max_tokens`; with them, the request's canvas width and (clamped) step cap."""

from __future__ import annotations

import json

import httpx
import pytest

from bench.vllm_standin import standin_log, start_standin
from engine.engine import default_model_path


@pytest.fixture(scope="module")
def standin():
    proc, url = start_standin(default_model_path())
    yield url
    proc.kill()
    proc.wait()


def fill(url: str, **body) -> tuple[str, str]:
    with httpx.stream("POST", f"{url}/v1/completions", json={"prompt": [2, 40, 41, 42], "stream": True, **body},
                      timeout=120) as resp:
        events = [json.loads(line[5:]) for line in resp.iter_lines()
                  if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    return "".join(e["choices"][0]["text"] for e in events), events[-1]["choices"][0]["finish_reason"]


def test_the_standin_honours_vllm_xargs(standin):
    models = httpx.get(f"{standin}/v1/models").json()["data"]
    assert models[0]["owned_by"] == "vllm"
    fill(standin, max_tokens=16)
    plain = standin_log(standin)[-1]
    assert (plain["width"], plain["steps_cap"], plain["canvas_tokens"]) == (64, 16, 64)  # the served canvas
    _, finish = fill(standin, max_tokens=32, vllm_xargs={"diffusion_canvas_length": 16, "diffusion_max_steps": 4})
    narrow = standin_log(standin)[-1]
    assert (narrow["width"], narrow["steps_cap"]) == (16, 4) and narrow["steps"] <= 4 * narrow["canvases"]
    assert narrow["canvas_tokens"] == 16 * narrow["canvases"] and finish in ("stop", "length")
    fill(standin, max_tokens=16, vllm_xargs={"diffusion_canvas_length": 16, "diffusion_max_steps": 99})
    assert standin_log(standin)[-1]["steps_cap"] == 16  # clamped to the served cap
