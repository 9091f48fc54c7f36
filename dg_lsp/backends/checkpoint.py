"""A checkpoint's tokenizer and prompt format, read from its small files without loading weights or torch.

Remote backends tokenize and lay out prompts in the language server, exactly as the embedded engine would
(engine.prompts.load_prompt_format, the function `Engine.from_pretrained` uses): the service backend reads the
files the service itself loaded (fetched once from it, checked by sha256); the OpenAI backend reads a local
directory holding the checkpoint's tokenizer and config files (no weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

import engine
from engine.config import load_config
from engine.prompts import load_prompt_format
from engine.seam import PromptFormat
from engine.tokens import splits_before_newline


def default_model_dir() -> Path:
    """The shipped model (engine.engine.default_model_path, without importing torch)."""
    return Path(engine.__file__).resolve().parent / "default_model"


@dataclass(frozen=True)
class LocalCheckpoint:
    path: Path
    tokenizer: Tokenizer
    prompt_format: PromptFormat
    splits_before_newline: bool
    default_steps: int = 48  # the checkpoint's max_denoising_steps: what the embedded engine runs with steps unset
    vocab_size: int = 0  # what a seed canvas laid out here needs (engine.seam.seed_canvases)
    eos_id: int = 1
    pad_id: int = 0

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""


def load_local(path: str | Path, prompt_format: str = "auto") -> LocalCheckpoint:
    """The tokenizer and prompt format ("auto", "fim" or "chat", as the promptFormat setting) of the checkpoint
    files in `path`: tokenizer.json and config.json at least, and the chat template files of a chat checkpoint."""
    path = Path(path).expanduser()
    missing = [f for f in ("tokenizer.json", "config.json") if not (path / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{path} has no {' or '.join(missing)}: the prompt is laid out in the language "
                                "server, so it needs the checkpoint's tokenizer and config files locally (modelPath "
                                "names their directory; the weights are not needed)")
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    config = load_config(path)
    fmt = load_prompt_format(path, tok, config, prompt_format)
    return LocalCheckpoint(path, tok, fmt, splits_before_newline(tok), config.sampler.max_denoising_steps,
                           config.text.vocab_size, config.eos_token_ids[0], config.text.pad_token_id)
