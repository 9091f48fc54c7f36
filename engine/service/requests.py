"""OpenAI-compatible request bodies -> engine jobs, and engine results -> OpenAI response bodies (pure functions).

Both endpoints take the dg extension object `"dg"` beside the OpenAI fields (docs/PROTOCOL.md, "Engine service"):
`canvas_length`, `max_canvases`, `steps`, `entropy_bound`, `seed`, `drafts` (with `stream: true`, one draft event
after every denoising step), `draft_text` (default true; false sends the step numbers only), `client` (the
supersede key), `init_ids` (token ids the canvas starts from instead of noise) and `start_noise` (0..1, default 1:
each seed position is replaced by a random id with this probability; engine.seam.InfillBackend.infill). `stop` (a
string or up to 4) is honoured (engine.service.stop). Text must be valid Unicode: a lone surrogate (`"\\ud800"` in
the JSON) is a 400 naming the field, never a tokenizer crash. Errors are `BadRequest`s whose message names the
field; the app answers them as OpenAI error bodies (`{"error": {"message", "type", "param", "code"}}`, the shape
current vLLM uses).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.seam_jobs import FillInputs
from engine.service.stop import MAX_STOP_CHARS, MAX_STOPS

SEED_MAX = 2**63 - 1


class BadRequest(Exception):
    """A request the service will not run; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.param, self.status = message, param, status


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the service."""

    max_body_bytes: int = 1 << 20
    max_prompt_tokens: int = 32768
    max_canvas_length: int = 1024
    max_canvases: int = 16
    max_steps: int = 256
    max_queue: int = 64

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"limit {name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ModelInfo:
    """What parsing needs to know of the loaded model."""

    name: str
    vocab_size: int
    canvas_lengths: tuple[int, ...]  # the prompt format's canvas lengths, ascending
    default_canvas: int  # the checkpoint's canvas length
    encode: Callable[[str], list[int]]
    bos_id: int | None = None  # prepended to a text prompt
    fim: Callable[[list[int], list[int]], list[int]] | None = None  # prefix ids, suffix ids -> context (`suffix`)


@dataclass(frozen=True)
class Parsed:
    inputs: FillInputs  # the engine inputs (checked against the service's limits)
    max_tokens: int
    stream: bool
    client: str | None
    stop: tuple[str, ...] = ()  # the answer ends before the first match of any (engine.service.stop)
    step_events: bool = False  # dg.drafts: a ("step", draft) event after every denoising step


def parse_completion(body: Any, info: ModelInfo, limits: Limits) -> Parsed:
    """`POST /v1/completions`: `prompt` as text or token ids (one prompt), optional `suffix` (FIM checkpoints)."""
    body = _common(body, info)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise BadRequest("suffix must be a string", "suffix")
    if suffix is not None:
        _unicode(suffix, "suffix")
    if isinstance(prompt, str):
        _unicode(prompt, "prompt")
        if suffix is not None:
            if info.fim is None:
                raise BadRequest("suffix needs a checkpoint with a fill-in-the-middle format", "suffix")
            ids = info.fim(info.encode(prompt), info.encode(suffix))
        else:
            ids = ([info.bos_id] if info.bos_id is not None else []) + info.encode(prompt)
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        if suffix is not None:
            raise BadRequest("suffix goes with a text prompt, not with token ids", "suffix")
        bad = next((t for t in prompt if not 0 <= t < info.vocab_size), None)
        if bad is not None:
            raise BadRequest(f"token id {bad} is outside the vocabulary [0, {info.vocab_size})", "prompt")
        ids = list(prompt)
    else:
        raise BadRequest("prompt must be a string or a non-empty list of token ids (one prompt per request)",
                         "prompt")
    return _parsed(body, ids, body.get("max_tokens"), info, limits)


def parse_chat(body: Any, info: ModelInfo, limits: Limits,
               render: Callable[[list[dict[str, Any]], dict[str, Any], bool], str]) -> Parsed:
    """`POST /v1/chat/completions`: `messages` rendered with the checkpoint's chat template;
    `chat_template_kwargs` (e.g. `{"enable_thinking": false}`) are passed to the template."""
    body = _common(body, info)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", "messages")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string role", "messages")
        _unicode(m["role"], f"messages[{i}].role", "messages")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: only text parts are meaningful here
            if not all(isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise BadRequest(f"messages[{i}].content parts must be text parts", "messages")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string", "messages")
        _unicode(content, f"messages[{i}].content", "messages")
        clean.append({"role": m["role"], "content": content})
    kwargs = body.get("chat_template_kwargs", {})
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping):
        raise BadRequest("chat_template_kwargs must be an object", "chat_template_kwargs")
    add_prompt = body.get("add_generation_prompt", True)
    if not isinstance(add_prompt, bool):
        raise BadRequest("add_generation_prompt must be true or false", "add_generation_prompt")
    text = render(clean, dict(kwargs), add_prompt)
    _unicode(text, "the prompt rendered with chat_template_kwargs", "chat_template_kwargs")  # the messages are clean
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return _parsed(body, info.encode(text), max_tokens, info, limits)


def _common(body: Any, info: ModelInfo) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("model must be a string", "model")
    if model is not None:
        _unicode(model, "model")
    if model is not None and model != info.name:
        raise BadRequest(f"The model `{model}` does not exist.", "model", status=404)
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise BadRequest("only n = 1 is supported", "n")
    for unsupported in ("echo", "logprobs", "tools"):
        if body.get(unsupported):
            raise BadRequest(f"{unsupported} is not supported by this service", unsupported)
    if not isinstance(body.get("stream", False), bool):
        raise BadRequest("stream must be true or false", "stream")
    return body


def _parsed(body: Mapping[str, Any], ids: list[int], max_tokens: Any, info: ModelInfo, limits: Limits) -> Parsed:
    if not ids:
        raise BadRequest("the prompt is empty", "prompt")
    if len(ids) > limits.max_prompt_tokens:
        raise BadRequest(f"the prompt has {len(ids)} tokens; this service takes at most {limits.max_prompt_tokens}",
                         "prompt", status=413)
    dg = body.get("dg", {})
    dg = {} if dg is None else dg
    if not isinstance(dg, Mapping):
        raise BadRequest("dg must be an object", "dg")
    canvas = _opt_int(dg, "canvas_length", 1, limits.max_canvas_length)
    canvases = _opt_int(dg, "max_canvases", 1, limits.max_canvases)
    steps = _opt_int(dg, "steps", 1, limits.max_steps)
    seed = _opt_int(dg, "seed", 0, SEED_MAX, body.get("seed")) or 0
    bound = dg.get("entropy_bound")
    if bound is not None and not (isinstance(bound, (int, float)) and not isinstance(bound, bool)
                                  and 0 < bound < math.inf):
        raise BadRequest("dg.entropy_bound must be a number > 0 or null", "dg.entropy_bound")
    budget = limits.max_canvas_length * limits.max_canvases
    if max_tokens is not None and not (_is_int(max_tokens) and 1 <= max_tokens <= budget):
        raise BadRequest(f"max_tokens must be an integer in 1..{budget}", "max_tokens")
    if canvas is None:
        want = max_tokens or info.default_canvas
        canvas = next((c for c in info.canvas_lengths if c >= want), info.canvas_lengths[-1])
        canvas = min(canvas, limits.max_canvas_length)
    if max_tokens is None:
        max_tokens = canvas * (canvases or 1)
    if canvases is None:
        canvases = -(-max_tokens // canvas)
        if canvases > limits.max_canvases:
            raise BadRequest(f"max_tokens {max_tokens} needs {canvases} canvases of {canvas} tokens; the limit is "
                             f"{limits.max_canvases}", "max_tokens")
    stream = bool(body.get("stream", False))
    drafts, draft_text = dg.get("drafts", False), dg.get("draft_text", True)
    if not isinstance(drafts, bool) or not isinstance(draft_text, bool):
        raise BadRequest("dg.drafts and dg.draft_text must be true or false", "dg.drafts")
    if drafts and not stream:
        raise BadRequest("dg.drafts needs stream: true", "dg.drafts")
    client = dg.get("client")
    if client is not None and not (isinstance(client, str) and 0 < len(client) <= 200):
        raise BadRequest("dg.client must be a string of 1..200 characters", "dg.client")
    if client is not None:
        _unicode(client, "dg.client")  # it goes into log lines
    stop = _stops(body.get("stop"))
    init_ids, noise = _seed(dg, info, canvas * canvases)
    inputs = FillInputs(list(ids), canvas, steps, None if bound is None else float(bound), canvases, seed,
                        draft_text=drafts and draft_text, init_ids=init_ids, start_noise=noise)
    return Parsed(inputs, max_tokens, stream, client, stop, step_events=drafts)


def _seed(dg: Mapping[str, Any], info: ModelInfo, room: int) -> tuple[list[int] | None, float]:
    """`dg.init_ids` (token ids, at most what the canvases hold) and `dg.start_noise` (a number in 0..1)."""
    init_ids, noise = dg.get("init_ids"), dg.get("start_noise", 1.0)
    if init_ids is not None:
        if not (isinstance(init_ids, list) and all(_is_int(t) for t in init_ids)):
            raise BadRequest("dg.init_ids must be a list of token ids or null", "dg.init_ids")
        bad = next((t for t in init_ids if not 0 <= t < info.vocab_size), None)
        if bad is not None:
            raise BadRequest(f"token id {bad} is outside the vocabulary [0, {info.vocab_size})", "dg.init_ids")
        if len(init_ids) > room:
            raise BadRequest(f"dg.init_ids has {len(init_ids)} ids; the canvases hold {room}", "dg.init_ids")
    noise = 1.0 if noise is None else noise
    if not (isinstance(noise, (int, float)) and not isinstance(noise, bool) and 0 <= noise <= 1):
        raise BadRequest("dg.start_noise must be a number in 0..1", "dg.start_noise")
    return (list(init_ids) if init_ids is not None else None), float(noise)


def _stops(value: Any) -> tuple[str, ...]:
    """OpenAI `stop`: null, a string, or a list of up to 4 strings."""
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not (isinstance(stops, list) and len(stops) <= MAX_STOPS
            and all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops)):
        raise BadRequest(f"stop must be a string or a list of at most {MAX_STOPS} strings, each of 1.."
                         f"{MAX_STOP_CHARS} characters", "stop")
    for s in stops:
        _unicode(s, "stop")
    return tuple(dict.fromkeys(stops))


def _unicode(text: str, what: str, param: str | None = None) -> None:
    """Refuse text that is not valid Unicode: JSON can carry lone surrogates (`"\\ud800"`), which no tokenizer
    or UTF-8 encoder takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(f"{what} is not valid Unicode: a lone surrogate (U+{ord(text[exc.start]):04X}) at "
                         f"character {exc.start}; send UTF-8 text (surrogate pairs in JSON escapes must be "
                         "complete)", param or what) from None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _opt_int(obj: Mapping[str, Any], key: str, lo: int, hi: int, fallback: Any = None) -> int | None:
    v = obj.get(key, fallback)
    if v is not None and not (_is_int(v) and lo <= v <= hi):
        raise BadRequest(f"dg.{key} must be an integer in {lo}..{hi}", f"dg.{key}")
    return v


# -- response bodies ---------------------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kinds = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 409: "ConflictError",
             413: "RequestTooLargeError", 429: "RateLimitError", 499: "ClientClosedRequest",
             503: "ServiceUnavailableError"}
    return {"error": {"message": message, "type": kinds.get(status, "InternalServerError"), "param": param,
                      "code": status}}


def completion_body(rid: str, model: str, text: str, finish: str | None, usage: dict[str, int] | None = None,
                    dg: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `text_completion`; streamed pieces have the same shape (as in vLLM) with the new text only."""
    out: dict[str, Any] = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
                           "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = usage
    if dg is not None:
        out["dg"] = dg
    return out


def chat_body(rid: str, model: str, text: str, finish: str | None, usage: dict[str, int] | None = None,
              dg: dict[str, Any] | None = None, chunk: bool = False, first: bool = False) -> dict[str, Any]:
    """A `chat.completion`, or with `chunk` a `chat.completion.chunk` whose delta carries `text`."""
    if chunk:
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish}
    out: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk" if chunk else "chat.completion",
                           "created": int(time.time()), "model": model, "choices": [choice]}
    if usage is not None:
        out["usage"] = usage
    if dg is not None:
        out["dg"] = dg
    return out
