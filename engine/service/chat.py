"""The served checkpoint's chat template for /v1/chat/completions (engine.prompts.template, rendered offline by
transformers; nothing downloaded, no checkpoint code run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.prompts.template import ChatTemplate, find_chat_template


class ChatUnavailable(Exception):
    """The checkpoint has no chat template."""


def chat_template(backend: Any, path: Path) -> ChatTemplate:
    """The template of a chat-format engine, else the checkpoint's own (a FIM checkpoint may have one too)."""
    template = getattr(backend.prompt_format, "template", None)
    if isinstance(template, ChatTemplate):
        return template
    found = find_chat_template(path)
    if found is None:
        raise ChatUnavailable(f"{path.name} has no chat template (chat_template.jinja, chat_template.json or a "
                              "chat_template in tokenizer_config.json); send a prompt to /v1/completions instead")
    tok, config = backend.tokenizer, backend.config
    ids = {"bos_token": config.text.bos_token_id, "eos_token": config.eos_token_ids[0],
           "pad_token": config.text.pad_token_id}
    special = {k: t for k, i in ids.items() if (t := tok.id_to_token(i)) is not None}
    return ChatTemplate(path, found[0], found[1], special)


def render(template: ChatTemplate, messages: list[dict[str, Any]], kwargs: dict[str, Any],
           add_generation_prompt: bool) -> str:
    """The prompt text; `kwargs` are the request's chat_template_kwargs (the template's own switches)."""
    kwargs = {k: v for k, v in kwargs.items() if k not in ("tokenize", "chat_template", "conversation", "messages")}
    try:
        return template.render(messages, add_generation_prompt=add_generation_prompt, **kwargs)
    except Exception as exc:  # a template error (raise_exception in the template, a bad role order, ...)
        raise ValueError(f"the chat template refused these messages: {exc}") from exc
