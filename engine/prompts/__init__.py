"""Prompt formats per checkpoint: which one a checkpoint declares (fim, chat), chosen by a setting or `auto`.

- `fim`: declared by `infill.json` or by all three FIM tokens in tokenizer.json (engine.tokens.InfillFormat);
- `chat`: declared by a chat template (`chat_template.jinja`, `chat_template.json`, or tokenizer_config.json's
  `chat_template`; else one the caller passes, as a GGUF's `tokenizer.chat_template`), rendered by transformers
  (engine.prompts.chat.ChatFormat);
- `auto`: fim when declared, else chat, else an error naming the files that are missing.
Special ids are always read from the checkpoint's tokenizer; nothing falls back to guessed ids.

Modules: template (find and render a chat template), chat (the chat PromptFormat), mask (the mask-infill format
of mask-diffusion families, chosen by their engine), answer (a chat answer
-> the hole's code).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from engine.config import CheckpointConfig
from engine.prompts.chat import ChatFormat
from engine.prompts.template import ChatTemplate, find_chat_template
from engine.seam import PromptFormat
from engine.tokens import INFILL_FILE, InfillFormat, PromptFormatError, fim_token_ids

PROMPT_FORMATS = ("auto", "fim", "chat")
# End-of-turn spellings of known chat tokenizers; only those that are tokens of the checkpoint's tokenizer count.
END_OF_TURN = ("<turn|>", "<end_of_turn>", "<eos>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>")
# (open, close) thinking tags: Gemma 4's channel, then the <think> spelling.
THINKING_TAGS = (("<|channel>", "<channel|>"), ("<think>", "</think>"))

__all__ = ["PROMPT_FORMATS", "ChatFormat", "PromptFormatError", "load_prompt_format"]


# A template passed in: (its text, where it came from, as `--check` names it).
Template = tuple[str, str]


def _template(path: Path, given: Template | None) -> Template | None:
    """The checkpoint's template files win over a template passed in."""
    return find_chat_template(path) or given


def declared(path: Path, tokenizer: Tokenizer, chat_template: Template | None = None) -> dict[str, bool]:
    """Which formats the checkpoint declares (see the module docstring)."""
    return {"fim": (path / INFILL_FILE).is_file() or fim_token_ids(tokenizer) is not None,
            "chat": _template(path, chat_template) is not None}


def _fim(path: Path, tokenizer: Tokenizer, config: CheckpointConfig) -> InfillFormat:
    t = config.text
    return InfillFormat.load(path, tokenizer, bos_id=t.bos_token_id, eos_id=config.eos_token_ids[0],
                             pad_id=t.pad_token_id)


def _chat(path: Path, tokenizer: Tokenizer, config: CheckpointConfig, given: Template | None) -> ChatFormat:
    found = _template(path, given)
    if found is None:
        raise PromptFormatError(f"the chat prompt format needs a chat template in {path}: chat_template.jinja, "
                                "chat_template.json or a 'chat_template' in tokenizer_config.json; none is there")
    t = config.text
    names = {"bos_token": t.bos_token_id, "eos_token": config.eos_token_ids[0], "pad_token": t.pad_token_id}
    special = {k: tok for k, i in names.items() if (tok := tokenizer.id_to_token(i)) is not None}
    template = ChatTemplate(path, found[0], found[1], special, tokenizer)
    stops = {tokenizer.id_to_token(i) for i in config.eos_token_ids} | {
        s for s in END_OF_TURN if tokenizer.token_to_id(s) is not None}
    thinking = next(((a, b) for a, b in THINKING_TAGS
                     if tokenizer.token_to_id(a) is not None and tokenizer.token_to_id(b) is not None), (None, None))
    return ChatFormat(template, tokenizer, canvas_length=config.canvas_length,
                      max_positions=t.max_position_embeddings, stops=tuple(sorted(s for s in stops if s)),
                      thinking=thinking)


def load_prompt_format(path: str | Path, tokenizer: Tokenizer | None, config: CheckpointConfig,
                       choice: str = "auto", chat_template: Template | None = None) -> PromptFormat:
    """The prompt format `choice` ("auto", "fim" or "chat") for the checkpoint at `path`; `chat_template`: (text,
    source) used when the checkpoint's files hold no template."""
    path = Path(path)
    if choice not in PROMPT_FORMATS:
        raise PromptFormatError(f"prompt format must be one of {', '.join(PROMPT_FORMATS)}; got {choice!r}")
    if tokenizer is None:
        raise PromptFormatError(f"{path} has no tokenizer.json: no prompt can be built for it (the id-based "
                                "engine API still works)")
    if choice == "auto":
        has = declared(path, tokenizer, chat_template)
        if not has["fim"] and not has["chat"]:
            raise PromptFormatError(
                f"{path} declares no prompt format: for fim it needs {INFILL_FILE} or the three FIM tokens "
                "(<fim_prefix>, <fim_middle>, <fim_suffix>, or the <|fim_...|> spellings) in tokenizer.json; "
                "for chat a chat_template.jinja (or a 'chat_template' in tokenizer_config.json). None is there.")
        choice = "fim" if has["fim"] else "chat"
    return _fim(path, tokenizer, config) if choice == "fim" else _chat(path, tokenizer, config, chat_template)
