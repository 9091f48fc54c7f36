"""The `service` backend: the project's engine service as an engine.seam.InfillBackend (same engine, shared).

Prompts are tokenized here with the service's own tokenizer files (fetched once, checked by sha256) and sent as
token ids with the dg extension, so a fill through the service is the fill the embedded engine would make.
Drafts stream back after every step. A watcher polls `/health` every `WATCH_S`: the service going away turns
the state to "error" within a second (dg/status follows), fills then fail at once with that reason, and the state turns
"ready" again when the service is back (restarted by this watcher when `autoStart` is on).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

import httpx

from dg_lsp.backends.autostart import AutoStart, local_service
from dg_lsp.backends.checkpoint import LocalCheckpoint, load_local
from dg_lsp.backends.remote import (
    LocalSide,
    LoopThread,
    RemoteDraft,
    RemoteError,
    RemoteResult,
    RemoteState,
    raise_for_error,
    sse_data,
)
from engine.seam import CancelFlag, SettingsInForce, StepDraft

log = logging.getLogger(__name__)

WATCH_S = 0.25  # /health poll period; with HEALTH_TIMEOUT_S, a vanished service shows within a second
HEALTH_TIMEOUT_S = 0.5
READY_TIMEOUT_S = 1800.0  # a large checkpoint may take minutes to load; dg/status says "loading" meanwhile


@dataclass(frozen=True)
class Endpoint:
    """Where the service listens: a Unix socket (`unix:/path`) or a base URL (`http://host:port`)."""

    url: str
    uds: str | None = None

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        if text.startswith("unix:"):
            return cls("http://dg-engine", text.removeprefix("unix:").removeprefix("//"))
        return cls(text.rstrip("/").removesuffix("/v1"))

    def __str__(self) -> str:
        return f"unix:{self.uds}" if self.uds else self.url

    @overload
    def client(self, timeout: httpx.Timeout | float, headers: dict[str, str],
               sync: Literal[False] = False) -> httpx.AsyncClient: ...

    @overload
    def client(self, timeout: httpx.Timeout | float, headers: dict[str, str], sync: Literal[True]) -> httpx.Client: ...

    def client(self, timeout: httpx.Timeout | float, headers: dict[str, str],
               sync: bool = False) -> httpx.Client | httpx.AsyncClient:
        if sync:
            return httpx.Client(base_url=self.url, timeout=timeout, headers=headers,
                                transport=httpx.HTTPTransport(uds=self.uds) if self.uds else None)
        return httpx.AsyncClient(base_url=self.url, timeout=timeout, headers=headers,
                                 transport=httpx.AsyncHTTPTransport(uds=self.uds) if self.uds else None)


def api_key_from(env_name: str | None) -> str | None:
    if not env_name:
        return None
    key = os.environ.get(env_name)
    if not key:
        raise ValueError(f"apiKeyEnv names {env_name}, but that environment variable is not set (or empty)")
    return key


def checkpoint_cache(checkpoint_id: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dg-lsp" / "checkpoints"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base / checkpoint_id


class ServiceBackend(LocalSide):
    """Connect with `ServiceBackend.connect(settings)` (blocking: run it on the engine thread)."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str], manifest: dict[str, Any],
                 local: LocalCheckpoint, starter: AutoStart | None = None) -> None:
        self.endpoint, self._headers, self.manifest, self.local = endpoint, headers, manifest, local
        self.starter = starter
        self.client_id = f"dg-lsp-{os.getpid()}-{uuid.uuid4().hex[:8]}"  # the service's supersede key
        self.status = RemoteState()
        self._loop = LoopThread("dg-service-client")
        self._http = self._loop.run(_make_async(endpoint, headers))
        self._closed = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="dg-service-watch", daemon=True)
        self._watcher.start()

    # -- connecting ----------------------------------------------------------------------------------------------
    @classmethod
    def connect(cls, settings: Any, ready_timeout_s: float = READY_TIMEOUT_S) -> ServiceBackend:
        headers = {"Authorization": f"Bearer {key}"} if (key := api_key_from(settings.api_key_env)) else {}
        mine = None
        if settings.endpoint:
            endpoint = Endpoint.parse(settings.endpoint)
        else:  # this user's own service: a Unix socket, or loopback TCP with a token (dg_lsp.backends.autostart)
            mine = local_service(settings.model_path, settings.device, settings.dtype, settings.prompt_format)
            endpoint = Endpoint(mine.url, mine.uds)
            if mine.token is not None:
                headers = {"Authorization": f"Bearer {mine.token}"}
        starter = None
        if settings.auto_start and endpoint.uds:
            starter = AutoStart(Path(endpoint.uds), settings.model_path, settings.device, settings.dtype,
                                settings.prompt_format)
        elif settings.auto_start and mine is not None:
            starter = AutoStart(mine.base, settings.model_path, settings.device, settings.dtype,
                                settings.prompt_format, tcp=mine)
        with endpoint.client(HEALTH_TIMEOUT_S * 4, headers, sync=True) as http:
            def ping() -> bool:
                return _health(http) is not None

            if starter is not None:
                starter.ensure(ping)
            _check_key(http, endpoint)
            deadline = time.monotonic() + ready_timeout_s
            retried = False
            while (health := _health(http)) is None or health.get("state") == "loading":
                if health is None:  # it died while loading: one more start, then its log says why
                    if starter is None:
                        raise ConnectionError(f"no engine service answers at {endpoint} (start one with `dg-lsp "
                                              "serve-engine`, or set autoStart with a unix: endpoint or none)")
                    if retried:
                        raise RuntimeError(f"the engine service exited while loading: {starter.log_tail()}")
                    retried = True
                    starter.ensure(ping)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the engine service at {endpoint} is still loading its model")
                time.sleep(0.1)
            if health.get("state") != "ready":
                raise RuntimeError(f"the engine service at {endpoint} could not load its model: {health.get('error')}")
            manifest = http.get("/v1/dg/checkpoint").raise_for_status().json()
            local = load_local(_fetch_files(http, manifest), manifest.get("prompt_format", "auto"))
        return cls(endpoint, headers, manifest, local, starter)

    # -- engine.seam.InfillBackend -------------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        return str(self.manifest["model"])

    @property
    def name(self) -> str:
        return f"{self.model_name} (engine service {self.endpoint})"

    def settings_in_force(self) -> SettingsInForce:
        """The service engine's own (its manifest: the same shape, the same sources)."""
        return {k: dict(v) for k, v in (self.manifest.get("settings_in_force") or {}).items() if isinstance(v, dict)}

    def infill(self, context_ids: list[int], *, canvas_length: int, steps: int | None = None,
               entropy_bound: float | None = None, max_canvases: int = 1, seed: int = 0,
               cancel: CancelFlag | None = None, on_step: Callable[[StepDraft], None] | None = None,
               draft_text: bool = False, init_ids: list[int] | None = None, start_noise: float = 1.0) -> RemoteResult:
        """engine.seam.InfillBackend.infill. `timings`: "total_ms" is this call's wall time (the HTTP round trip
        and the wait in the service's queue included); the service engine's own figures are "service_encode_ms",
        "service_decode_ms" and "service_total_ms"."""
        t0 = time.perf_counter()
        out = self._fill(context_ids, canvas_length, steps, entropy_bound, max_canvases, seed, cancel, on_step,
                         draft_text, init_ids, start_noise)
        out.timings["total_ms"] = (time.perf_counter() - t0) * 1e3
        return out

    def _fill(self, context_ids: list[int], canvas_length: int, steps: int | None, entropy_bound: float | None,
              max_canvases: int, seed: int, cancel: CancelFlag | None, on_step: Callable[[StepDraft], None] | None,
              draft_text: bool, init_ids: list[int] | None, start_noise: float) -> RemoteResult:
        if not self.status.ready:
            return RemoteResult.failed(self.status.message)
        dg: dict[str, Any] = {"canvas_length": canvas_length, "max_canvases": max_canvases, "steps": steps,
                              "entropy_bound": entropy_bound, "seed": seed, "drafts": True,
                              "draft_text": bool(draft_text), "client": self.client_id}
        if init_ids is not None:  # unseeded bodies stay as older services know them
            dg.update(init_ids=list(init_ids), start_noise=start_noise)
        body = {"model": self.model_name, "prompt": list(context_ids), "max_tokens": canvas_length * max_canvases,
                "stream": True, "dg": dg}
        seen = [0]  # steps run, over all canvases (a draft's `step` counts within its canvas)

        def step(draft: RemoteDraft) -> None:
            seen[0] += 1
            if on_step is not None:
                on_step(draft)

        try:
            out: RemoteResult | None = self._loop.call(lambda put: _stream_fill(self._http, body, put), cancel,
                                  abort=lambda: not self.status.ready, on_event=step)
        except RemoteError as exc:
            if exc.status == 409:  # superseded or cancelled at the service (by this client): an ordinary end
                return RemoteResult("", steps=seen[0], cancelled=True)
            log.warning("engine service fill failed: %s", exc)
            return RemoteResult.failed(f"the engine service failed the fill: {exc}", seen[0])
        except httpx.TransportError as exc:
            self.status.set_state("error", f"the engine service at {self.endpoint} went away ({exc})")
            return RemoteResult.failed(f"the engine service at {self.endpoint} went away "
                                       f"({type(exc).__name__}: {exc})", seen[0])
        if out is None:  # the caller's cancel, or the watcher saw the service go (abort)
            if cancel is not None and cancel.cancelled:
                return RemoteResult("", steps=seen[0], cancelled=True)
            return RemoteResult.failed(self.status.message or f"the engine service at {self.endpoint} went away",
                                       seen[0])
        return out

    def close(self) -> None:
        """Stop watching and answer every later fill empty (the loop thread stays: a queued fill may still call)."""
        self._closed.set()
        self.status.set_state("error", "this connection to the engine service was closed")
        self._loop.run(self._http.aclose(), timeout=2)

    # -- the watcher ---------------------------------------------------------------------------------------------
    def _watch(self) -> None:
        http = self.endpoint.client(HEALTH_TIMEOUT_S, self._headers, sync=True)
        late = False
        while not self._closed.wait(WATCH_S):
            health, slow = _probe(http)
            if health is None and slow and not late:
                late = True  # one late answer is a busy machine, not a dead service: ask again before saying so
                continue
            late = False
            if health is None and self.starter is not None:
                self.status.set_state("error", f"the engine service at {self.endpoint} is not answering; restarting it")
                try:
                    self.starter.ensure(lambda: _health(http) is not None)
                except Exception as exc:  # noqa: BLE001 -- reported as the state; tried again next round
                    log.warning("restarting the engine service failed: %s", exc)
                health = _health(http)
            if health is None:
                self.status.set_state("error", f"the engine service at {self.endpoint} is not answering")
            elif health.get("state") != "ready":
                self.status.set_state("error", _not_ready(self.endpoint, health))
            elif health.get("checkpoint") != self.manifest.get("id"):
                self.status.set_state("error", "the engine service now serves another checkpoint; reload the window")
            else:
                self.status.set_state("ready", f"the engine service at {self.endpoint} answers")
            if self.starter is not None:
                self.starter.reap()
        http.close()


def _not_ready(endpoint: Endpoint, health: dict[str, Any]) -> str:
    """dg/status's message for a service that answers but cannot fill yet: what it is doing, and its error only
    when it has one. The watcher runs after connect() saw the service ready, so "loading" means it was restarted
    (by this watcher, or by another dg-lsp sharing it that noticed first)."""
    state = health.get("state") or "not ready"
    if state == "loading":
        return f"the engine service at {endpoint} is restarting: loading its model"
    error = health.get("error")
    return f"the engine service at {endpoint} is {state}" + (f": {error}" if error else "")


async def _make_async(endpoint: Endpoint, headers: dict[str, str]) -> httpx.AsyncClient:
    # no read timeout: a fill waits its turn behind other clients; the watcher notices a dead service instead
    return endpoint.client(httpx.Timeout(None, connect=2.0), headers)


async def _stream_fill(http: httpx.AsyncClient, body: dict[str, Any], put: Callable[[Any], None]) -> RemoteResult:
    async with http.stream("POST", "/v1/completions", json=body) as resp:
        await raise_for_error(resp)
        async for ev in sse_data(resp):
            dg = ev.get("dg") or {}
            if "draft" in dg:
                put(RemoteDraft(dg["step"], dg["steps"], dg["draft"], dg.get("canvas", 0)))
                continue
            choice = (ev.get("choices") or [{}])[0]
            if choice.get("finish_reason") is not None:
                confidence = dg.get("confidence")
                return RemoteResult(choice.get("text", ""), steps=int(dg.get("steps", 0)),
                                    reused_prefix_tokens=int(dg.get("reused_prefix_tokens", 0)),
                                    timings={f"service_{k}": float(v) for k, v in (dg.get("timings") or {}).items()},
                                    confidence=float(confidence) if isinstance(confidence, int | float) else None)
    raise RemoteError("the engine service ended the stream without a result")


def _check_key(http: httpx.Client, endpoint: Endpoint) -> None:
    try:
        status = http.get("/health").status_code
    except httpx.HTTPError:
        return  # not answering: the caller says so
    if status == 401:
        raise PermissionError(f"the engine service at {endpoint} refused the API key (check apiKeyEnv)")


def _health(http: httpx.Client) -> dict[str, Any] | None:
    return _probe(http)[0]


def _probe(http: httpx.Client) -> tuple[dict[str, Any] | None, bool]:
    """(/health's answer or None, whether it was None because the answer was late rather than refused)."""
    try:
        resp = http.get("/health")
        return (resp.json() if resp.status_code == 200 else None), False
    except httpx.TimeoutException:
        return None, True
    except (httpx.HTTPError, ValueError):
        return None, False


def _fetch_files(http: httpx.Client, manifest: dict[str, Any]) -> Path:
    """The service's tokenizer and config files in a local cache directory (downloaded once per checkpoint)."""
    target = checkpoint_cache(str(manifest["id"]))
    if target.is_dir():
        return target
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:  # into `tmp`, renamed to `target` once whole: a failure (a full disk) leaves neither behind
        tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name, meta in manifest["files"].items():
            if name != Path(name).name or name.startswith("."):
                raise RuntimeError(f"the engine service named a checkpoint file {name!r}; refusing it")
            data = http.get(f"/v1/dg/checkpoint/{name}").raise_for_status().content
            if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                raise RuntimeError(f"{name} from the engine service does not match its checksum")
            (tmp / name).write_bytes(data)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, f"could not cache the engine service's checkpoint files in {target}: "
                          f"{exc.strerror or exc} (nothing was kept)") from exc
        raise
    try:
        tmp.rename(target)
    except OSError:  # another window cached it first
        shutil.rmtree(tmp, ignore_errors=True)
        if not target.is_dir():
            raise
    return target
