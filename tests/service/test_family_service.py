"""The engine service on a mask-diffusion family's checkpoint (Dream, LLaDA: tiny published-layout folders,
engine.testing.families): `dg-lsp serve-engine --model DIR --port 0` passes its pre-load check, says ready on
/health, fills through the language server's `service` backend exactly as the embedded engine does, and an inline
completion over stdio lands; the `openai` backend refuses such a checkpoint by name (no OpenAI-compatible server
fills a mask-diffusion hole). One service process per family."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import threading

import httpx
import pytest
from lsprotocol import types as T
from service_harness import child_env, wait_until

from engine.testing.families import tiny_family
from tests.lsp.server_harness import start_server, stop_server

PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\n\nprint(add(1, 2))\n"


class TcpService:
    """`python -m dg_lsp serve-engine --model DIR --port 0 --device cpu`, its port read from "listening on"."""

    def __init__(self, model) -> None:
        cmd = [sys.executable, "-m", "dg_lsp", "serve-engine", "--model", str(model), "--port", "0", "--device", "cpu"]
        self.proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()  # a full pipe would block the service
        found = wait_until(self._url, 120, "serve-engine's 'listening on' line")
        self.url = str(found)

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def _url(self) -> str | None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"serve-engine exited {self.proc.returncode}: {''.join(self.lines)}")
        hits = [m.group(1) for line in self.lines if (m := re.search(r"listening on (http://\S+)", line))]
        return hits[0] if hits else None

    def health(self) -> dict | None:
        try:
            r = httpx.get(f"{self.url}/health", timeout=2)
            return r.json() if r.status_code == 200 else None
        except httpx.HTTPError:
            return None

    def wait_ready(self, what: str) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve-engine exited: {''.join(self.lines)}")
            h = self.health()
            return bool(h and h["state"] == "ready")

        wait_until(ready, 120, what)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)


@pytest.fixture(scope="module", params=["dream", "llada"])
def family_service(request, tmp_path_factory):
    variant = "gqa_untied" if request.param == "dream" else "mha"
    path, _ = tiny_family(tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}", request.param, variant)
    svc = TcpService(path)
    try:
        svc.wait_ready(f"serve-engine on the tiny {request.param} checkpoint")
        yield request.param, path, svc
    finally:
        svc.stop()


def _service_backend(url: str):
    from dg_lsp.backends.factory import build_backend
    from dg_lsp.config import Settings

    return build_backend(Settings(backend="service", endpoint=url, auto_start=False))


def test_serve_engine_on_a_family_checkpoint_is_ready(family_service):
    family, path, svc = family_service
    health = svc.health()
    assert health["state"] == "ready" and health["path"] == str(path) and health["model"] == path.name
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        files = c.get("/v1/dg/checkpoint").json()["files"]
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= set(files)


def test_the_service_backend_fills_a_family_checkpoint_as_the_embedded_engine(family_service):
    from engine.engine import Engine

    family, path, svc = family_service
    eng = Engine.from_pretrained(path, device="cpu")
    backend = _service_backend(svc.url)
    try:
        assert backend.prompt_format.name == eng.prompt_format.name == "mask"
        ids = backend.prompt_format.context(backend.encode(PREFIX), backend.encode(SUFFIX))
        assert ids == eng.prompt_format.context(eng.encode(PREFIX), eng.encode(SUFFIX))
        assert ids.count(eng.prompt_format.mask_id) == 1
        got, want = backend.infill(ids, canvas_length=16), eng.infill(ids, canvas_length=16)
        assert got.error is None and not got.cancelled
        assert got.text == want.text and got.steps == want.steps > 0
    finally:
        backend.close()


async def test_an_inline_completion_through_the_service_backend_lands(family_service):
    family, _, svc = family_service
    init = {"backend": "service", "endpoint": svc.url, "autoStart": False, "debounceMs": 0, "minConfidence": 0,
            "drafts": False}
    client = await start_server(None, init, wait_ready=True, env=child_env())
    try:
        assert "engine service" in client.statuses[-1]["model"]
        uri = "file:///w/add.py"
        text = PREFIX + SUFFIX
        client.text_document_did_open(T.DidOpenTextDocumentParams(
            text_document=T.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        params = T.InlineCompletionParams(
            text_document=T.TextDocumentIdentifier(uri=uri), position=T.Position(line=1, character=11),
            context=T.InlineCompletionContext(trigger_kind=T.InlineCompletionTriggerKind.Invoked))
        result = await asyncio.wait_for(client.text_document_inline_completion_async(params), 120)
        done = [s["request"] for s in client.statuses if s.get("request")]
        assert done and done[-1]["cancelled"] is False and done[-1]["steps"] > 0, client.statuses[-3:]
        assert done[-1]["reason"] is None and done[-1]["canvasLength"] > 0, done[-1]
        assert result is not None and result.items and result.items[0].insert_text  # the fill landed
    finally:
        await stop_server(client)


def test_the_openai_backend_refuses_a_family_checkpoint_by_name(tmp_path):
    from dg_lsp.backends.openai import OpenAIBackend
    from dg_lsp.config import Settings

    path, _ = tiny_family(tmp_path / "tiny-dream", "dream", "gqa_untied")
    settings = Settings(backend="openai", endpoint="http://127.0.0.1:9/v1", model_path=str(path))
    with pytest.raises(ValueError, match=r"a dream checkpoint.*vLLM serves neither Dream nor LLaDA.*backend service"):
        OpenAIBackend.connect(settings)


def test_the_service_backend_fills_a_dream_gguf_with_nothing_beside_it(tmp_path):
    """llama.cpp's Dream GGUF alone: the service hands out the tokenizer rebuilt from the file and the family's
    numbers (engine.service.app.family_client_config), and the `service` backend fills as the embedded engine."""
    import json

    from safetensors.torch import load_file

    from engine.engine import Engine
    from engine.testing.gguf_mdm_write import write_mdm_gguf

    src, _ = tiny_family(tmp_path / "hf", "dream", "gqa_untied", seed=5)
    (tmp_path / "alone").mkdir()
    tensors = {k: v.float() for f in sorted(src.glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    path = write_mdm_gguf(json.loads((src / "config.json").read_text()), tensors,
                          tmp_path / "alone" / "dream-F32.gguf", "F32", tokenizer_dir=src)
    svc = TcpService(path)
    try:
        svc.wait_ready("serve-engine on the Dream GGUF")
        eng = Engine.from_pretrained(path, device="cpu")
        backend = _service_backend(svc.url)
        try:
            assert backend.prompt_format == eng.prompt_format
            ids = backend.prompt_format.context(backend.encode(PREFIX), backend.encode(SUFFIX))
            assert ids == eng.prompt_format.context(eng.encode(PREFIX), eng.encode(SUFFIX))
            got, want = backend.infill(ids, canvas_length=16), eng.infill(ids, canvas_length=16)
            assert got.error is None and got.text == want.text and got.steps == want.steps > 0
        finally:
            backend.close()
    finally:
        svc.stop()


def test_serve_engines_pre_load_check_reads_each_family_and_refuses_a_causal_qwen2_by_name(tmp_path):
    import json

    from engine.tools.command import Refused, checked_model

    path, _ = tiny_family(tmp_path / "tiny-dream", "dream", "gqa_untied")
    assert checked_model(str(path), "cpu") == path
    raw = json.loads((path / "config.json").read_text())
    raw.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    raw.pop("mask_token_id", None)
    (path / "config.json").write_text(json.dumps(raw))
    tok_cfg = json.loads((path / "tokenizer_config.json").read_text())
    tok_cfg.pop("mask_token", None)
    (path / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    with pytest.raises(Refused, match=r"causal Qwen2 model .*not a diffusion model") as caught:
        checked_model(str(path), "cpu")
    assert "\n" not in str(caught.value)
