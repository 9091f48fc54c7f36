"""The `openai` backend: any OpenAI-compatible server, vLLM serving DiffusionGemma being the documented case.

Chat-format checkpoints go through `/v1/chat/completions` (the hole's messages, `chat_template_kwargs:
{"enable_thinking": false}`, `max_completion_tokens` from the hole); FIM checkpoints through `/v1/completions` with
the prompt as token ids. Prompts are laid out here, so the backend needs the checkpoint's tokenizer files locally
(`modelPath`; the weights are not needed); a chat fill's messages are read back from the ids the checkpoint's
format laid out (engine.prompts.chat.ChatFormat.conversation), so the ids are all that crosses the seam. Such
servers stream one committed canvas at a time, so there are no drafts. Cancelling a fill closes its request, which
aborts it on the server. A failed connection turns the state to "error" until `/models` answers; every failure is
the fill's `error` (engine.seam.FillResult), never a cancel.

vLLM serving a diffusion model (its `/v1/models` card says `owned_by: "vllm"`; setting `openaiDiffusion`) is asked
for exactly what the embedded engine would run: the hole's canvas length and the step budget per request, in
`vllm_xargs: {"diffusion_canvas_length": N, "diffusion_max_steps": S}` (vLLM 0.33: utils/diffusion.py checks them,
DiffusionGemma's sampler applies them per slot), so a 16-token hole denoises 16 positions, not the served canvas.
The sampler (entropy bound, temperatures) stays the server's: vLLM reads it from generation_config.json. A stream
ending with `finish_reason: "length"` is a fill whose last canvas did not reach an end token: its text is kept, as
the embedded engine keeps an unfinished canvas's text; "abort" or "error" fail the fill.

A seeded fill (`init_ids`, `start_noise`: a rewrite starting from the selected code) goes to vLLM as
`vllm_xargs: {"diffusion_seed_canvas": [...], "diffusion_pinned": []}`: exactly `diffusion_canvas_length` ids
(utils/diffusion.py checks the count), laid out as the embedded engine lays out its first canvas
(engine.seam.seed_canvases: eos then pad after the seed) and corrupted here at level `start_noise` (`corrupt_seed`),
since vLLM starts from the seed as sent; no position is pinned. Only the first canvas is seeded (vLLM takes one).
A server that is not vLLM serving a diffusion model gets the plain request: the seed is dropped.

A mask-diffusion family's checkpoint (Dream, Open-dCoder, LLaDA) is refused by name at connect: vLLM serves none of
them, and a completions server would not fill their mask; the `service` backend serves them.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from dg_lsp.backends.checkpoint import LocalCheckpoint, default_model_dir, load_local
from dg_lsp.backends.loading import EndpointDown
from dg_lsp.backends.remote import (
    LocalSide,
    LoopThread,
    RemoteError,
    RemoteResult,
    RemoteState,
    raise_for_error,
    sse_data,
)
from dg_lsp.backends.service import Endpoint, api_key_from
from engine.prompts.chat import ChatFormat
from engine.seam import CancelFlag, PromptFormat, SettingsInForce, StepDraft, seed_canvases

log = logging.getLogger(__name__)

RECHECK_S = 1.0  # how often /models is asked while the server is unreachable
TEMPLATE_KWARGS = {"enable_thinking": False}
FAILED_FINISH = ("abort", "error")  # finish reasons that end a stream without a usable fill


def openai_endpoint(text: str) -> Endpoint:
    """The API base (`http://host:8000/v1`; a bare `http://host:8000` gets `/v1`; `unix:/path` too)."""
    if text.startswith("unix:"):
        return Endpoint("http://dg-engine/v1", Endpoint.parse(text).uds)
    base = text.rstrip("/")
    return Endpoint(base if httpx.URL(base).path not in ("", "/") else base + "/v1")


class OpenAIBackend(LocalSide):
    """Connect with `OpenAIBackend.connect(settings)` (blocking: run it on the engine thread)."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str], model: str, local: LocalCheckpoint,
                 diffusion: bool = False, server: str | None = None) -> None:
        self.endpoint, self._headers, self.model, self.local = endpoint, headers, model, local
        self.diffusion = diffusion  # send vLLM's per-request canvas and steps (vllm_xargs)
        self.server = server  # "vLLM 0.33.0", or None when the server did not say
        # a chat checkpoint's fills go as messages, read back from the ids its format laid out (the one place the
        # backend looks at which format it has)
        self._chat = local.prompt_format if isinstance(local.prompt_format, ChatFormat) else None
        self.template_kwargs = dict(TEMPLATE_KWARGS)
        self.status = RemoteState()
        self._loop = LoopThread("dg-openai-client")
        self._http = self._loop.run(_make_async(endpoint, headers))
        self._rechecking = threading.Lock()
        self._closed = False

    @classmethod
    def connect(cls, settings: Any) -> OpenAIBackend:
        if not settings.endpoint:
            raise ValueError("backend openai needs endpoint: the server's API base, e.g. http://gpu-box:8000/v1")
        endpoint = openai_endpoint(settings.endpoint)
        headers = {"Authorization": f"Bearer {key}"} if (key := api_key_from(settings.api_key_env)) else {}
        local = load_local(settings.model_path or default_model_dir(), settings.prompt_format)
        if local.family != "diffusion_gemma":  # a mask-diffusion family: no OpenAI-compatible server fills its holes
            raise ValueError(f"backend openai cannot serve {local.path} (a {local.family} checkpoint): vLLM serves "
                             "neither Dream nor LLaDA and a completions server would not fill its mask; use backend "
                             f"service (`dg-lsp serve-engine --model {local.path}`) or the embedded engine")
        with endpoint.client(10.0, headers, sync=True) as http:
            try:
                resp = http.get("models")
            except httpx.HTTPError as exc:
                raise EndpointDown("the OpenAI-compatible server", endpoint, exc, "start it (e.g. `vllm serve`), or "
                                   "set the endpoint setting to where it listens") from None
            if resp.status_code >= 400:
                raise ConnectionError(f"{endpoint}/models answered HTTP {resp.status_code}: {resp.text[:200]}")
            cards = {m.get("id"): m for m in resp.json().get("data", []) if isinstance(m, dict)}
            model = settings.model or next(iter(cards), None)
            if not model:
                raise ValueError(f"{endpoint} lists no models; set the model setting")
            if model not in cards:
                log.warning("model %r is not among those %s lists (%s)", model, endpoint, list(cards))
            vllm = (cards.get(model) or {}).get("owned_by") == "vllm"
            server = _vllm_version(http, endpoint) if vllm else None
        mode = settings.openai_diffusion
        diffusion = mode == "on" or (mode == "auto" and vllm)  # the checkpoint is a diffusion model (load_local)
        return cls(endpoint, headers, model, local, diffusion, server)

    # -- engine.seam.InfillBackend -------------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        return self.model

    @property
    def name(self) -> str:
        canvases = ", per-request canvases" if self.diffusion else ""
        return f"{self.model} ({self.server or 'OpenAI-compatible'} at {self.endpoint}{canvases}, no drafts)"

    @property
    def prompt_format(self) -> PromptFormat:
        return self.local.prompt_format

    def settings_in_force(self) -> SettingsInForce:
        """What this backend sends per request (on vLLM serving a diffusion model: the hole's canvas and the step
        budget, `vllm_xargs`); the sampler is the server's (vLLM: the checkpoint's generation_config.json, or
        --generation-config DIR), and there is no calibrated confidence gate (no confidence comes back)."""
        here = "vllm_xargs" if self.diffusion else "server"
        return {"steps": {"value": self.local.default_steps if self.diffusion else None, "source": here},
                "canvas_length": {"value": "the hole's" if self.diffusion else None, "source": here},
                "sampler": {"value": None, "source": "server"},
                "min_confidence": {"value": None, "source": "default"}}

    def request(self, context_ids: list[int], canvas_length: int, steps: int | None = None,
                max_canvases: int = 1, init_ids: list[int] | None = None, start_noise: float = 1.0,
                seed: int = 0) -> tuple[str, dict[str, Any]]:
        """(path, body) of the request `infill` sends for one fill."""
        max_tokens = canvas_length * max_canvases
        body: dict[str, Any]
        messages = self._chat.conversation(context_ids) if self._chat is not None else None
        if messages is not None:
            path, body = "chat/completions", {"model": self.model, "messages": messages,
                                              "max_completion_tokens": max_tokens, "stream": True,
                                              "chat_template_kwargs": self.template_kwargs}
        else:  # FIM, or ids that are no chat rendering: the token ids as they are
            path, body = "completions", {"model": self.model, "prompt": list(context_ids), "max_tokens": max_tokens,
                                         "stream": True}
        if self.diffusion:  # the embedded engine's canvas and step budget for this hole (never seed/temperature:
            # vLLM refuses those for diffusion models)
            body["vllm_xargs"] = {"diffusion_canvas_length": canvas_length,
                                  "diffusion_max_steps": steps or self.local.default_steps}
            loc = self.local
            first = seed_canvases(init_ids, start_noise, canvas_length, loc.vocab_size, loc.eos_id, loc.pad_id)[:1]
            if first:
                body["vllm_xargs"].update(diffusion_seed_canvas=corrupt_seed(list(first[0]), start_noise,
                                                                             loc.vocab_size, seed),
                                          diffusion_pinned=[])
        return path, body

    def infill(self, context_ids: list[int], *, canvas_length: int, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, on_step: Callable[[StepDraft], None] | None = None,
               draft_text: bool = False, init_ids: list[int] | None = None, start_noise: float = 1.0) -> RemoteResult:
        """engine.seam.InfillBackend.infill as one request; on vLLM the canvas, `steps` and the seed canvas go with
        it, `entropy_bound` stays the server's, `seed` only picks the seed canvas's corruption. No step is streamed,
        so `on_step` is never called; `steps` counts the streamed pieces, "total_ms" is the call's wall time."""
        t0 = time.perf_counter()
        out = self._fill(context_ids, canvas_length, steps, max_canvases, seed, cancel, init_ids, start_noise)
        out.timings["total_ms"] = (time.perf_counter() - t0) * 1e3
        return out

    def _fill(self, context_ids: list[int], canvas_length: int, steps: int | None, max_canvases: int, seed: int,
              cancel: CancelFlag | None, init_ids: list[int] | None, start_noise: float) -> RemoteResult:
        if not self.status.ready:
            self._recheck()
            return RemoteResult.failed(self.status.message)
        path, body = self.request(context_ids, canvas_length, steps, max_canvases, init_ids, start_noise, seed)
        try:
            out: RemoteResult | None = self._loop.call(lambda put: _stream(self._http, path, body), cancel)
        except RemoteError as exc:
            log.warning("%s/%s: %s", self.endpoint, path, exc)
            return RemoteResult.failed(f"{self.endpoint}/{path} failed: {exc}")
        except httpx.TransportError as exc:
            why = f"{self.endpoint} is not answering ({type(exc).__name__}: {exc})"
            self.status.set_state("error", why)
            self._recheck()
            return RemoteResult.failed(why)
        if out is None:  # only the caller's cancel stops the call early (no abort here)
            return RemoteResult("", cancelled=True)
        return out

    def close(self) -> None:
        """Answer every later fill empty (the loop thread stays: a queued fill may still call)."""
        self._closed = True
        self.status.set_state("error", "this connection was closed")
        self._loop.run(self._http.aclose(), timeout=2)

    def _recheck(self) -> None:
        """While the server is unreachable, ask /models every RECHECK_S (one checker thread at a time)."""
        if not self._closed and self._rechecking.acquire(blocking=False):
            threading.Thread(target=self._recheck_loop, name="dg-openai-recheck", daemon=True).start()

    def _recheck_loop(self) -> None:
        try:
            with self.endpoint.client(RECHECK_S, self._headers, sync=True) as http:
                while not self.status.ready and not self._closed:
                    try:
                        if http.get("models").status_code < 400:
                            self.status.set_state("ready", f"{self.endpoint} answers again")
                            return
                    except httpx.HTTPError:
                        pass
                    time.sleep(RECHECK_S)
        finally:
            self._rechecking.release()


async def _make_async(endpoint: Endpoint, headers: dict[str, str]) -> httpx.AsyncClient:
    return endpoint.client(httpx.Timeout(None, connect=5.0), headers)


async def _stream(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> RemoteResult:
    """Concatenate a streamed completion (`choices[0].text`) or chat completion (`choices[0].delta.content`) and
    read its `finish_reason` ("stop", "length": kept; "abort", "error": the fill failed)."""
    parts: list[str] = []
    pieces, finish = 0, None
    async with http.stream("POST", path, json=body) as resp:
        await raise_for_error(resp)
        async for ev in sse_data(resp):
            for choice in ev.get("choices") or []:
                text = choice.get("text") if "text" in choice else (choice.get("delta") or {}).get("content")
                if text:
                    parts.append(text)
                    pieces += 1
                finish = choice.get("finish_reason") or finish
    if finish in FAILED_FINISH:
        raise RemoteError(f"the server ended the request with finish_reason {finish!r}")
    return RemoteResult("".join(parts), steps=pieces, finish_reason=finish)


def corrupt_seed(canvas: list[int], noise: float, vocab: int, seed: int) -> list[int]:
    """The training corruption the embedded engine applies to a seed canvas, for a server that starts from the seed
    as sent: each position independently replaced by a uniform random id with probability `noise`, drawn from
    `random.Random(seed)` (per position: a uniform, then an id where it is replaced). Not the engine's draws: only
    the distribution is the same."""
    if noise <= 0:
        return list(canvas)
    draw = random.Random(seed)
    return [draw.randrange(vocab) if draw.random() < noise else t for t in canvas]


def _vllm_version(http: httpx.Client, endpoint: Endpoint) -> str:
    """"vLLM <version>" from vLLM's `GET /version` (beside /v1), or plain "vLLM" when it does not answer."""
    try:
        resp = http.get(httpx.URL(endpoint.url).join("/version"))
        return f"vLLM {resp.json()['version']}" if resp.status_code == 200 else "vLLM"
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return "vLLM"
