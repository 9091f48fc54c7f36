"""Server settings: one frozen dataclass, parsed from client JSON; a bad key gives a message and its default.

Precedence (docs/PROTOCOL.md): defaults < `initializationOptions` < each `workspace/didChangeConfiguration`.
A configuration change is merged over the current settings, so a client may send only the keys it changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
WEIGHTS = ("auto", "bf16", "int8", "int4", "fp8")  # engine.quant.plan (not imported: no torch for --version)
PROMPT_FORMATS = ("auto", "fim", "chat")  # engine.prompts.PROMPT_FORMATS (not imported: no torch for --version)
BACKENDS = ("embedded", "service", "openai")
# The gate of a checkpoint `dg-lsp calibrate` has not measured (no "min_confidence" in its infill.json): none. A
# threshold is a property of a checkpoint (how its token probabilities relate to right answers); guessed for an
# unmeasured one, it would hide good fills or show junk without anyone knowing which.
UNCALIBRATED_MIN_CONFIDENCE = 0.0
OPENAI_DIFFUSION = ("auto", "on", "off")  # openai backend: send vLLM's per-request diffusion arguments?


@dataclass(frozen=True)
class Settings:
    """What a client can change. Field names are snake_case; the wire keys are the camelCase in `KEYS`."""

    enabled: bool = True
    model_path: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    steps: int | None = None
    entropy_bound: float | None = None
    debounce_ms: int = 75
    languages: tuple[str, ...] | None = None
    context_tokens: int = 1024
    drafts: bool = False
    prompt_format: str = "auto"
    weights: str = "auto"  # how the weights are stored: the checkpoint's own format, else the widest that fits
    # where fills run (docs/PROTOCOL.md, "Backends"): in this process, the shared engine service, or an
    # OpenAI-compatible server; `api_key_env` is the *name* of the environment variable holding the key
    backend: str = "embedded"
    endpoint: str | None = None
    api_key_env: str | None = None
    model: str | None = None
    auto_start: bool = True
    # The confidence gate (docs/PROTOCOL.md): fills below it are not shown and commands below it do not edit.
    # None: the checkpoint's calibrated value (infill.json), else UNCALIBRATED_MIN_CONFIDENCE.
    min_confidence: float | None = None
    # openai: per-request canvas and steps in `vllm_xargs` (auto: when /v1/models says the server is vLLM)
    openai_diffusion: str = "auto"
    # dg.rewriteSelection starts its canvas from the selection's own tokens (FIM checkpoints), each replaced by
    # noise with probability rewrite_noise (0: the selection as is; 1: from noise, as without the setting)
    rewrite_from_selection: bool = False
    rewrite_noise: float = 0.5
    # context from other files (docs/PROTOCOL.md, "Context from other files"): tokens of it per prompt, taken out
    # of contextTokens (None: a quarter of contextTokens; 0: off, and no workspace index is built); index caps
    cross_file_tokens: int | None = None
    index_max_files: int = 5000
    index_max_file_bytes: int = 262144
    # next-edit suggestions (docs/PROTOCOL.md "Next edits"): on/off; how long clients wait after the last edit
    # before they ask; the window's lines above/below the cursor; clients show only a gutter mark; the seeded
    # canvas's corruption level (FIM checkpoints: 0 the window as it is, 1 from noise)
    next_edit: bool = True
    next_edit_debounce_ms: int = 400
    next_edit_lines_above: int = 2
    next_edit_lines_below: int = 8
    next_edit_indicator_only: bool = False
    next_edit_noise: float = 0.5

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            err = _CHECKS[f.name](getattr(self, f.name))
            if err:
                raise ValueError(f"{f.name}: {err}")

    def engine_key(self) -> tuple:
        """The settings that need a model reload when they change."""
        return (self.model_path, self.device, self.dtype, self.prompt_format, self.weights, self.backend, self.endpoint,
                self.api_key_env, self.model, self.auto_start, self.openai_diffusion)

    def cross_file_budget(self) -> int:
        """Tokens of context from other files per prompt (at most half of contextTokens)."""
        want = self.context_tokens // 4 if self.cross_file_tokens is None else self.cross_file_tokens
        return min(want, self.context_tokens // 2)

    def language_enabled(self, language_id: str) -> bool:
        return self.enabled and (self.languages is None or language_id in self.languages)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_range(lo: int, hi: int, nullable: bool = False) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if v is None and nullable:
            return None
        if not _is_int(v) or not lo <= v <= hi:
            return f"expected an integer in {lo}..{hi}{' or null' if nullable else ''}, got {v!r}"
        return None

    return check


def _choice(options: tuple[str, ...]) -> Callable[[Any], str | None]:
    return lambda v: None if v in options else f"expected one of {', '.join(options)}, got {v!r}"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"expected true or false, got {v!r}"


def _path(v: Any) -> str | None:
    return None if v is None or (isinstance(v, str) and v) else f"expected a path string or null, got {v!r}"


def _bound(v: Any) -> str | None:
    ok = v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf"))
    return None if ok else f"expected a number > 0 or null, got {v!r}"


def _unit(v: Any) -> str | None:
    ok = v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0)
    return None if ok else f"expected a number in 0..1 or null, got {v!r}"


def _fraction(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0
    return None if ok else f"expected a number in 0..1, got {v!r}"


def _endpoint(v: Any) -> str | None:
    ok = v is None or (isinstance(v, str) and v.startswith(("unix:/", "http://", "https://")))
    return None if ok else f"expected unix:/PATH, http://HOST:PORT or https://... or null, got {v!r}"


def _env_name(v: Any) -> str | None:
    ok = v is None or (isinstance(v, str) and v.isidentifier() and v.isascii())
    why = "expected the name of an environment variable (not the key itself) or null"
    return None if ok else f"{why}, got a {type(v).__name__}"


def _name(v: Any) -> str | None:
    return None if v is None or (isinstance(v, str) and v) else f"expected a model id string or null, got {v!r}"


def _languages(v: Any) -> str | None:
    ok = v is None or (isinstance(v, tuple) and all(isinstance(x, str) and x for x in v))
    return None if ok else f"expected a list of languageId strings or null, got {v!r}"


_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "enabled": _bool,
    "model_path": _path,
    "device": _choice(DEVICES),
    "dtype": _choice(DTYPES),
    "steps": _int_range(1, 256, nullable=True),
    "entropy_bound": _bound,
    "debounce_ms": _int_range(0, 2000),
    "languages": _languages,
    "context_tokens": _int_range(64, 32768),
    "drafts": _bool,
    "prompt_format": _choice(PROMPT_FORMATS),
    "weights": _choice(WEIGHTS),
    "backend": _choice(BACKENDS),
    "endpoint": _endpoint,
    "api_key_env": _env_name,
    "model": _name,
    "auto_start": _bool,
    "min_confidence": _unit,
    "openai_diffusion": _choice(OPENAI_DIFFUSION),
    "rewrite_from_selection": _bool,
    "rewrite_noise": _fraction,
    "cross_file_tokens": _int_range(0, 16384, nullable=True),
    "index_max_files": _int_range(0, 1_000_000),
    "index_max_file_bytes": _int_range(1024, 16 << 20),
    "next_edit": _bool,
    "next_edit_debounce_ms": _int_range(0, 10_000),
    "next_edit_lines_above": _int_range(0, 50),
    "next_edit_lines_below": _int_range(0, 100),
    "next_edit_indicator_only": _bool,
    "next_edit_noise": _fraction,
}

# wire key (camelCase) -> field name
KEYS: dict[str, str] = {
    "enabled": "enabled",
    "modelPath": "model_path",
    "device": "device",
    "dtype": "dtype",
    "steps": "steps",
    "entropyBound": "entropy_bound",
    "debounceMs": "debounce_ms",
    "languages": "languages",
    "contextTokens": "context_tokens",
    "drafts": "drafts",
    "promptFormat": "prompt_format",
    "weights": "weights",
    "backend": "backend",
    "endpoint": "endpoint",
    "apiKeyEnv": "api_key_env",
    "model": "model",
    "autoStart": "auto_start",
    "minConfidence": "min_confidence",
    "openaiDiffusion": "openai_diffusion",
    "rewriteFromSelection": "rewrite_from_selection",
    "rewriteNoise": "rewrite_noise",
    "crossFileTokens": "cross_file_tokens",
    "indexMaxFiles": "index_max_files",
    "indexMaxFileBytes": "index_max_file_bytes",
    "nextEdit": "next_edit",
    "nextEditDebounceMs": "next_edit_debounce_ms",
    "nextEditLinesAbove": "next_edit_lines_above",
    "nextEditLinesBelow": "next_edit_lines_below",
    "nextEditIndicatorOnly": "next_edit_indicator_only",
    "nextEditNoise": "next_edit_noise",
}

_DEFAULTS = Settings()


def unwrap(raw: Any) -> Any:
    """`{"settings": {"dg": {...}}}`, `{"dg": {...}}` and a bare `{...}` all mean the same object."""
    if isinstance(raw, Mapping) and set(raw) == {"settings"}:
        raw = raw["settings"]
    if isinstance(raw, Mapping) and set(raw) == {"dg"}:
        raw = raw["dg"]
    return raw


def parse_settings(raw: Any, base: Settings = _DEFAULTS) -> tuple[Settings, list[str]]:
    """Merge client JSON over `base`. Returns the settings and one human-readable error per rejected key.

    A rejected key takes its default value (not `base`'s), as docs/PROTOCOL.md says. `None` or `{}` changes
    nothing.
    """
    raw = unwrap(raw)
    if raw is None:
        return base, []
    if not isinstance(raw, Mapping):
        return base, [f"dg settings: expected an object, got {type(raw).__name__}; settings unchanged"]
    values = dataclasses.asdict(base)
    errors: list[str] = []
    for key, value in raw.items():
        name = KEYS.get(key)
        if name is None:
            errors.append(f"dg settings: unknown key {key!r} ignored")
            continue
        if name == "languages" and isinstance(value, list):
            value = tuple(value)
        if name in ("entropy_bound", "min_confidence", "rewrite_noise", "next_edit_noise") and _is_int(value):
            value = float(value)
        err = _CHECKS[name](value)
        if err:
            errors.append(f"dg settings: {key}: {err}; using the default {getattr(_DEFAULTS, name)!r}")
            value = getattr(_DEFAULTS, name)
        values[name] = value
    return Settings(**values), errors
