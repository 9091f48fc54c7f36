"""A checkpoint's tokenizer and prompt format, read from its small files without loading weights or torch.

Remote backends tokenize and lay out prompts in the language server, exactly as the embedded engine would: the
service backend reads the files the service itself loaded (fetched once from it, checked by sha256); the OpenAI
backend reads a local directory holding at least the checkpoint's `tokenizer.json`. The FIM ids come from the
tokenizer and config.json as `Engine.from_pretrained` takes them; keep the two in step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

import engine
from engine.config import load_config
from engine.tokens import INFILL_FILE, InfillFormat, splits_before_newline

PROMPT_FORMATS = ("auto", "fim", "chat")


def default_model_dir() -> Path:
    """The shipped model (engine.engine.default_model_path, without importing torch)."""
    return Path(engine.__file__).resolve().parent / "default_model"


@dataclass(frozen=True)
class LocalCheckpoint:
    path: Path
    tokenizer: Tokenizer
    prompt_format: Any  # engine.seam.PromptFormat
    splits_before_newline: bool

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids


def has_fim_tokens(tok: Tokenizer) -> bool:
    spellings = ("<fim_{}>", "<|fim_{}|>", "<fim-{}>")
    return all(any(tok.token_to_id(s.format(part)) is not None for s in spellings)
               for part in ("prefix", "middle", "suffix"))


def load_local(path: str | Path, prompt_format: str = "auto") -> LocalCheckpoint:
    """The tokenizer and prompt format of the checkpoint files in `path`. `prompt_format` "auto" takes fim when
    the checkpoint declares it (infill.json, or all three FIM tokens), else chat when it has a chat template."""
    from engine.service.chat import ChatTemplate, find_template

    path = Path(path).expanduser()
    tok_file = path / "tokenizer.json"
    if not tok_file.is_file():
        raise FileNotFoundError(f"{path} has no tokenizer.json (the prompt is tokenized here, so the backend needs "
                                "the checkpoint's tokenizer files locally; modelPath names their directory)")
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    tok = Tokenizer.from_file(str(tok_file))
    fim = (path / INFILL_FILE).is_file() or has_fim_tokens(tok)
    if prompt_format == "auto":
        prompt_format = "fim" if fim else "chat" if find_template(path) else ""
        if not prompt_format:
            raise ValueError(f"{path} declares no prompt format: no {INFILL_FILE}, no FIM tokens in tokenizer.json, "
                             "no chat template (chat_template.jinja or tokenizer_config.json)")
    if prompt_format == "fim":
        if not fim:
            raise ValueError(f"{path} has no FIM tokens in tokenizer.json and no {INFILL_FILE}")
        fmt: Any = InfillFormat.load(path, tok)
        ids = _special_ids(path, tok)
        fmt = InfillFormat(layout=fmt.layout, fim_prefix_id=fmt.fim_prefix_id, fim_middle_id=fmt.fim_middle_id,
                           fim_suffix_id=fmt.fim_suffix_id, canvas_lengths=fmt.canvas_lengths,
                           max_context_tokens=fmt.max_context_tokens, **ids)
    else:
        from dg_lsp.backends.chat_prompt import ChatPrompt

        raw = json.loads((path / INFILL_FILE).read_text()) if (path / INFILL_FILE).is_file() else {}
        kwargs = {"canvas_lengths": tuple(raw["canvas_lengths"])} if raw.get("canvas_lengths") else {}
        fmt = ChatPrompt(ChatTemplate.load(path), tok, max_context_tokens=raw.get("max_context_tokens"), **kwargs)
    return LocalCheckpoint(path, tok, fmt, splits_before_newline(tok))


def _special_ids(path: Path, tok: Tokenizer) -> dict[str, int]:
    """bos/eos/pad as the engine takes them (config.json), else as the tokenizer spells them."""
    if (path / "config.json").is_file():
        t = load_config(path).text
        return {"bos_id": t.bos_token_id, "eos_id": t.eos_token_ids[0], "pad_id": t.pad_token_id}
    out = {}
    for key, name in (("bos_id", "<bos>"), ("eos_id", "<eos>"), ("pad_id", "<pad>")):
        tid = tok.token_to_id(name)
        if tid is not None:
            out[key] = tid
    return out
