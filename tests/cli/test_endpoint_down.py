"""A vLLM / OpenAI-compatible endpoint that is down: the server's error names the endpoint and says it is down or
not answering, in one line (it once said "could not load the default model: ConnectionError")."""

from __future__ import annotations

import socket

from dg_lsp.backends.factory import build_backend
from dg_lsp.config import Settings
from dg_lsp.fill.worker import Worker


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


async def test_a_down_endpoint_is_named_as_down():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    worker = Worker(build_backend, check=None)
    try:
        await worker.load(Settings(backend="openai", endpoint=url))
        assert worker.state == "error" and worker.engine is None
        assert worker.error == (f"the OpenAI-compatible server at {url} is down or not answering (connection "
                                "refused); start it (e.g. `vllm serve`), or set the endpoint setting to where it "
                                "listens")
    finally:
        worker.shutdown()
