"""Chat prompts rendered offline with a checkpoint's own template (transformers' `apply_chat_template`).

The template comes from `chat_template.jinja` or the `chat_template` field of `tokenizer_config.json`; the
tokenizer is the checkpoint's `tokenizer.json` with the special tokens `tokenizer_config.json` names. Nothing is
downloaded and no checkpoint code runs (jinja's sandbox renders the template, as in transformers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


class ChatUnavailable(Exception):
    """The checkpoint has no chat template (or no tokenizer to render it with)."""


def find_template(path: Path) -> str | None:
    """The checkpoint's chat template text, or None when it declares none."""
    f = path / TEMPLATE_FILE
    if f.is_file():
        return f.read_text(encoding="utf-8")
    cfg = _tokenizer_config(path)
    tmpl = cfg.get("chat_template")
    if isinstance(tmpl, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        tmpl = next((t.get("template") for t in tmpl if isinstance(t, dict) and t.get("name") == "default"), None)
    return tmpl if isinstance(tmpl, str) and tmpl else None


def _tokenizer_config(path: Path) -> dict[str, Any]:
    f = path / TOKENIZER_CONFIG
    if not f.is_file():
        return {}
    raw = json.loads(f.read_text(encoding="utf-8"))
    return raw if isinstance(raw, dict) else {}


class ChatTemplate:
    """Renders chat messages to the prompt text the checkpoint was trained on."""

    def __init__(self, tokenizer: Any, template: str) -> None:
        self._tok, self.template = tokenizer, template

    @classmethod
    def load(cls, path: str | Path) -> ChatTemplate:
        path = Path(path)
        template = find_template(path)
        if template is None:
            raise ChatUnavailable(f"{path.name} has no chat template ({TEMPLATE_FILE} or a chat_template field in "
                                  f"{TOKENIZER_CONFIG}); send a completion prompt to /v1/completions instead")
        tok_file = path / "tokenizer.json"
        if not tok_file.is_file():
            raise ChatUnavailable(f"{path.name} has a chat template but no tokenizer.json to render it with")
        from transformers import PreTrainedTokenizerFast

        cfg = _tokenizer_config(path)
        specials = {k: v for k in SPECIAL_KEYS if isinstance(v := _token_text(cfg.get(k)), str)}
        return cls(PreTrainedTokenizerFast(tokenizer_file=str(tok_file), **specials), template)

    def render(self, messages: list[dict[str, Any]], kwargs: dict[str, Any] | None = None,
               add_generation_prompt: bool = True) -> str:
        """The prompt text (special tokens written out, as the template writes them)."""
        kwargs = {k: v for k, v in (kwargs or {}).items()
                  if k not in ("tokenize", "chat_template", "add_generation_prompt", "conversation")}
        try:
            return self._tok.apply_chat_template(messages, tokenize=False, chat_template=self.template,
                                                 add_generation_prompt=add_generation_prompt, **kwargs)
        except Exception as exc:  # a template error (raise_exception in the template, a bad role order, ...)
            raise ValueError(f"the chat template refused these messages: {exc}") from exc


def _token_text(v: Any) -> str | None:
    """`"<bos>"` or `{"content": "<bos>", ...}` (AddedToken as tokenizer_config.json writes it)."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None
