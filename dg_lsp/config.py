"""Server settings: one frozen dataclass, parsed from client JSON against `RULES` (docs/PROTOCOL.md's settings
table is the schema: a test holds the two equal); a rejected value is named once and the value in force stays.

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
            err = check(f.name, getattr(self, f.name))
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


MAX_STRING = 4096  # characters of a string setting (a path, an id); longer is refused
MAX_LIST = 256  # entries of a list setting
ENTROPY_BOUND_MAX = 1000.0  # nats: past a canvas's whole entropy (256 positions x ln 262,144 is ~3,200) in practice
SHOWN_CHARS = 60  # of a rejected value or key in a message


def shorten(v: Any) -> str:
    """`repr(v)` for a message, at most SHOWN_CHARS characters (a 2 MB string is never echoed back whole)."""
    try:
        text = repr(v)
    except (ValueError, RecursionError):  # an int past Python's 4,300-digit limit; a deeply nested value
        return f"a {type(v).__name__}"
    if len(text) <= SHOWN_CHARS:
        return text
    size = f", {len(v):,} characters" if isinstance(v, str) else ""
    return f"{text[:SHOWN_CHARS]}...{size}"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_STRING


@dataclass(frozen=True)
class Rule:
    """What one setting accepts: `doc` is its type column in docs/PROTOCOL.md's settings table (a test compares
    them), `ok` the check itself. Every accepted number is finite and in its range before it reaches the engine."""

    doc: str
    ok: Callable[[Any], bool]


def _ints(lo: int, hi: int, nullable: bool = False) -> Rule:
    return Rule(f"int {lo}..{hi}{' or null' if nullable else ''}",
                lambda v: (v is None and nullable) or (_is_int(v) and lo <= v <= hi))


def _floats(lo: float, hi: float, nullable: bool = False, open_low: bool = False) -> Rule:
    """Numbers in [lo, hi] (`open_low`: (lo, hi]); NaN fails every comparison, so it never passes."""
    doc = f"float ({lo:g}, {hi:g}]" if open_low else f"float {lo:g}..{hi:g}"
    return Rule(doc + (" or null" if nullable else ""),
                lambda v: (v is None and nullable) or (_is_num(v) and (lo < v if open_low else lo <= v) and v <= hi))


def _choice(options: tuple[str, ...]) -> Rule:
    return Rule(" \\| ".join(f'"{o}"' for o in options), lambda v: v in options)


def _string(test: Callable[[str], bool] = lambda v: True) -> Rule:
    return Rule("string or null", lambda v: v is None or (_is_str(v) and test(v)))


BOOL = Rule("bool", lambda v: isinstance(v, bool))
LANGUAGES = Rule("list of languageId or null", lambda v: v is None or (
    isinstance(v, tuple) and len(v) <= MAX_LIST and all(_is_str(x) for x in v)))

RULES: dict[str, Rule] = {
    "enabled": BOOL,
    "model_path": _string(),
    "device": _choice(DEVICES),
    "dtype": _choice(DTYPES),
    "steps": _ints(1, 256, nullable=True),
    "entropy_bound": _floats(0, ENTROPY_BOUND_MAX, nullable=True, open_low=True),
    "debounce_ms": _ints(0, 2000),
    "languages": LANGUAGES,
    "context_tokens": _ints(64, 32768),
    "drafts": BOOL,
    "prompt_format": _choice(PROMPT_FORMATS),
    "weights": _choice(WEIGHTS),
    "backend": _choice(BACKENDS),
    "endpoint": _string(lambda v: v.startswith(("unix:/", "http://", "https://"))),
    "api_key_env": _string(lambda v: v.isidentifier() and v.isascii()),
    "model": _string(),
    "auto_start": BOOL,
    "min_confidence": _floats(0, 1, nullable=True),
    "openai_diffusion": _choice(OPENAI_DIFFUSION),
    "rewrite_from_selection": BOOL,
    "rewrite_noise": _floats(0, 1),
    "cross_file_tokens": _ints(0, 16384, nullable=True),
    "index_max_files": _ints(0, 1_000_000),
    "index_max_file_bytes": _ints(1024, 16 << 20),
    "next_edit": BOOL,
    "next_edit_debounce_ms": _ints(0, 10_000),
    "next_edit_lines_above": _ints(0, 50),
    "next_edit_lines_below": _ints(0, 100),
    "next_edit_indicator_only": BOOL,
    "next_edit_noise": _floats(0, 1),
}
# what a rejected value is said to be: never the value itself for the key's environment-variable *name* setting
# (a user who pastes the key there must not see it echoed into a log)
_SECRET = frozenset({"api_key_env"})


def check(name: str, v: Any) -> str | None:
    """Why `v` is not a valid value of the setting `name` (None: it is)."""
    if RULES[name].ok(v):
        return None
    got = f"a {type(v).__name__}" if name in _SECRET else shorten(v)
    what = "the name of an environment variable (not the key itself)" if name in _SECRET else RULES[name].doc
    return f"expected {what}, got {got}"


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
    """Merge client JSON over `base`. Returns the settings and the messages to show: one per rejected value (the
    key keeps `base`'s value, the one in force), and one for all unknown keys together. `None` or `{}` changes
    nothing."""
    raw = unwrap(raw)
    if raw is None:
        return base, []
    if not isinstance(raw, Mapping):
        return base, [f"dg settings: expected an object, got {type(raw).__name__}; settings unchanged"]
    values = dataclasses.asdict(base)
    errors: list[str] = []
    unknown: list[str] = []
    for key, value in raw.items():
        name = KEYS.get(key) if isinstance(key, str) else None
        if name is None:
            unknown.append(key)
            continue
        if name == "languages" and isinstance(value, list):
            value = tuple(value)
        if name in _FLOATS and _is_int(value) and RULES[name].ok(value):
            value = float(value)
        err = check(name, value)
        if err:
            errors.append(f"dg settings: {key}: {err}; keeping {shorten(getattr(base, name))}")
            continue
        values[name] = value
    if unknown:
        shown = ", ".join(shorten(k) for k in unknown[:UNKNOWN_SHOWN])
        more = f" and {len(unknown) - UNKNOWN_SHOWN:,} more" if len(unknown) > UNKNOWN_SHOWN else ""
        errors.append(f"dg settings: {len(unknown):,} unknown key{'s' if len(unknown) > 1 else ''} ignored: "
                      f"{shown}{more}")
    return Settings(**values), errors


_FLOATS = frozenset({"entropy_bound", "min_confidence", "rewrite_noise", "next_edit_noise"})
UNKNOWN_SHOWN = 5  # unknown keys named in the one message about them
