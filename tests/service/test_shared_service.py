"""Two clients sharing one engine service on the shipped model: the model is loaded once, both get the fills the
embedded engine makes, a cancel from one leaves the other's fill alone, and a client that disconnects stops its
canvas at the service within one denoising step."""

from __future__ import annotations

import threading

import httpx
import pytest
from service_harness import DEFAULT_MODEL, wait_until

from dg_lsp.config import Settings
from engine.seam import CancelToken

PREFIX, SUFFIX = "def area(width, height):\n    return ", "\n\n\nprint(area(2, 3))\n"


@pytest.fixture(scope="module")
def embedded():
    from engine.engine import Engine

    return Engine.from_pretrained(DEFAULT_MODEL, device="cpu")


def join(connect, service) -> object:
    return connect(Settings(backend="service", endpoint=service.endpoint, auto_start=False))


def context(backend, prefix: str = PREFIX) -> list[int]:
    return backend.prompt_format.context(backend.encode(prefix), backend.encode(SUFFIX))


def test_two_clients_share_one_loaded_model_and_get_the_embedded_engines_fills(service, embedded, connect):
    a, b = join(connect, service), join(connect, service)
    ids_a, ids_b = context(a), context(b, "def area(w, h):\n    return ")
    assert ids_a == context(embedded) and a.splits_before_newline == embedded.splits_before_newline
    results: dict[str, object] = {}

    def fill(key: str, backend, ids: list[int]) -> None:
        results[key] = backend.infill(ids, canvas_length=16)

    threads = [threading.Thread(target=fill, args=args) for args in (("a", a, ids_a), ("b", b, ids_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for key, ids in (("a", ids_a), ("b", ids_b)):
        want = embedded.infill(ids, canvas_length=16)
        assert not results[key].cancelled and results[key].text == want.text and results[key].steps == want.steps
        # the confidence gate sees the same confidence through the service as in process
        assert want.confidence is not None and results[key].confidence == pytest.approx(want.confidence)
    health = service.health()
    assert health["model_loads"] == 1 and health["state"] == "ready"
    assert a.model_name == b.model_name == "default_model" and a.client_id != b.client_id


def test_a_cancel_from_one_client_leaves_the_others_fill_alone(service, embedded, connect):
    a, b = join(connect, service), join(connect, service)
    ids_b = context(b)
    want = embedded.infill(ids_b, canvas_length=32, steps=24)
    before = service.health()["requests"]["cancelled"]
    token = CancelToken()
    drafts: list[int] = []

    def first_step(draft) -> None:
        drafts.append(draft.step)
        token.cancel()  # A cancels after its first denoising step

    out: dict[str, object] = {}
    ta = threading.Thread(target=lambda: out.update(a=a.infill(context(a, "x = "), canvas_length=64, steps=200,
                                                               cancel=token, on_step=first_step)))
    tb = threading.Thread(target=lambda: out.update(b=b.infill(ids_b, canvas_length=32, steps=24)))
    ta.start()
    tb.start()
    ta.join(60)
    tb.join(60)
    assert out["a"].cancelled and out["a"].text == "" and drafts == [1]
    assert not out["b"].cancelled and out["b"].text == want.text
    wait_until(lambda: service.health()["requests"]["cancelled"] > before, 20, "the service to cancel A's canvas")


def test_a_client_that_disconnects_mid_fill_stops_its_canvas(service):
    stats = service.health()["requests"]
    body = {"prompt": [2, 5, 3, 4], "stream": True, "dg": {"canvas_length": 64, "steps": 256, "drafts": True,
                                                           "draft_text": False, "entropy_bound": 1e-4}}
    with service.http() as http, http.stream("POST", "/v1/completions", json=body) as resp:
        for line in resp.iter_lines():
            if '"draft"' in line:
                break  # the first step is done: hang up
    wait_until(lambda: service.health()["running"] == 0, 30, "the engine to stop")
    health = service.health()
    after = health["requests"]
    assert after["cancelled"] == stats["cancelled"] + 1 and after["done"] == stats["done"]
    assert health["steps_after_cancel_max"] <= 1  # the canvas stopped within one denoising step


def test_a_plain_request_whose_client_gives_up_is_cancelled_too(service):
    stats = service.health()["requests"]
    # a tiny entropy bound accepts about one token a step: the fill would take ~150 steps (seconds)
    body = {"prompt": [2, 5, 3, 6, 4], "max_tokens": 64, "dg": {"canvas_length": 64, "steps": 256,
                                                                "entropy_bound": 1e-4}}
    with service.http(timeout=0.3) as http, pytest.raises(httpx.ReadTimeout):
        http.post("/v1/completions", json=body)  # the client hangs up after 0.3 s
    wait_until(lambda: service.health()["running"] == 0, 30, "the engine to stop")
    after = service.health()["requests"]
    assert after["cancelled"] == stats["cancelled"] + 1 and after["done"] == stats["done"]
