"""A checkpoint's chat template: found in its files, rendered offline by transformers' own tokenizer class."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.tokens import PromptFormatError

# Where checkpoints keep a chat template, in the order transformers looks (the .jinja file wins).
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
_SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


def _pick(template: Any) -> str | None:
    """A template string, or the one named "default" from a list of named templates."""
    if isinstance(template, str):
        return template or None
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        return named.get("default")
    return None


def find_chat_template(checkpoint: Path) -> tuple[str, str] | None:
    """(template, the file it came from), or None when the checkpoint has none."""
    path = Path(checkpoint)
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(), jinja.name
    for name in ("chat_template.json", "tokenizer_config.json"):
        file = path / name
        if file.is_file():
            template = _pick(json.loads(file.read_text()).get("chat_template"))
            if template:
                return template, name
    return None


class ChatTemplate:
    """Renders messages with `apply_chat_template(..., add_generation_prompt=True)`, thinking off through the
    template's own `enable_thinking` switch when it has one. Special-token strings come from tokenizer_config.json,
    else from the config's ids looked up in the tokenizer (a template's `bos_token` must never render as "None").
    `tokenizer`: the checkpoint's tokenizer object (else its tokenizer.json is read; a GGUF may have none)."""

    def __init__(self, checkpoint: Path, template: str, source: str, special: dict[str, str],
                 tokenizer: Any = None) -> None:
        from transformers import PreTrainedTokenizerFast

        path = Path(checkpoint)
        cfg_file = path / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
        tokens = dict(special)
        for key in _SPECIAL_KEYS:
            value = cfg.get(key)
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str) and value:
                tokens[key] = value
        self.source = source
        self.thinking_switch = "enable_thinking" in template
        source_tok = ({"tokenizer_file": str(path / "tokenizer.json")} if tokenizer is None
                      else {"tokenizer_object": tokenizer})  # transformers deep-copies the object
        self._tok = PreTrainedTokenizerFast(**source_tok, **tokens)
        self._tok.chat_template = template
        for key in _SPECIAL_KEYS:
            if key in template and key not in tokens:
                raise PromptFormatError(f"the chat template in {source} uses {key}, which neither "
                                        "tokenizer_config.json nor config.json defines")

    def _kwargs(self) -> dict[str, Any]:
        return {"enable_thinking": False} if self.thinking_switch else {}

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The whole prompt as text, ending with the model's turn opened. `kwargs` go to the template (an OpenAI
        request's `chat_template_kwargs`, as the engine service passes them); thinking stays off unless they say."""
        return self._tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False,
                                             **{**self._kwargs(), **kwargs})

    def reference_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """transformers' own tokenization of the rendered prompt (what its examples feed to `generate`)."""
        out = self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **self._kwargs())
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)
