"""Special tokens, the byte-level BPE recipe, and the infill prompt layout shared by training and inference."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

if TYPE_CHECKING:
    from engine.seam import HoleInfo

# Ids 0..2 are fixed by the DiffusionGemma architecture (pad, eos, bos); the FIM sentinels follow.
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>"]
INFILL_FILE = "infill.json"
# How tokenizers spell the FIM sentinels: ours, CodeGemma/StarCoder's, and a hyphenated variant.
FIM_SPELLINGS = {part: (f"<fim_{part}>", f"<|fim_{part}|>", f"<fim-{part}>") for part in ("prefix", "middle", "suffix")}


class PromptFormatError(ValueError):
    """A checkpoint cannot be prompted the way asked (missing tokens or files); the message says what is missing."""


def fim_token_ids(tokenizer: Tokenizer) -> dict[str, int] | None:
    """{"fim_prefix_id", "fim_middle_id", "fim_suffix_id"} read from the tokenizer, or None unless all three exist."""
    ids = {}
    for part, spellings in FIM_SPELLINGS.items():
        tid = next((t for t in map(tokenizer.token_to_id, spellings) if t is not None), None)
        if tid is None:
            return None
        ids[f"fim_{part}_id"] = tid
    return ids


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE: every UTF-8 string round-trips losslessly (the 256 byte symbols are always present)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def splits_before_newline(tok: Tokenizer) -> bool:
    """True when encode(a + b) == encode(a) + encode(b) for every `a` ending in a non-whitespace character and `b`
    starting with a newline, so a text can be tokenized in two parts there (the LSP server re-tokenizes only the
    cursor's line of a prompt). That holds for a byte-level BPE split by the GPT-2 regex with no normalizer, no
    prefix space and no added token holding a newline: the regex always starts a new piece at whitespace that
    follows non-whitespace, and BPE merges stay within a piece. Other tokenizers (SentencePiece-style ones, for
    instance) are not assumed to."""
    cfg = json.loads(tok.to_str())
    pre, post, model = cfg.get("pre_tokenizer") or {}, cfg.get("post_processor"), cfg.get("model") or {}
    return (cfg.get("normalizer") is None and pre.get("type") == "ByteLevel" and pre.get("use_regex", True)
            and not pre.get("add_prefix_space", False) and (post is None or post.get("type") == "ByteLevel")
            and model.get("type") == "BPE" and model.get("dropout") is None
            and all("\n" not in t.get("content", "") for t in cfg.get("added_tokens") or []))


@dataclass(frozen=True)
class InfillFormat:
    """How a checkpoint wants prefix/suffix laid out in the encoder context (from `infill.json`).

    "suffix_first": <bos><fim_suffix>SUFFIX<fim_prefix>PREFIX<fim_middle>. The encoder is causal, so while the user
    types at the cursor only the tail of the context changes and the KV cache of everything before it is reusable.
    """

    name: ClassVar[str] = "fim"  # the prompt format's name at the engine seam (engine.seam.PromptFormat)
    canvas_headroom: ClassVar[int] = 0  # a FIM canvas holds only code (see engine.prompts.chat.ChatFormat)
    layout: str = "suffix_first"
    bos_id: int = 2
    eos_id: int = 1
    pad_id: int = 0
    fim_prefix_id: int = 3
    fim_middle_id: int = 4
    fim_suffix_id: int = 5
    canvas_lengths: tuple[int, ...] = (16, 32, 64)
    # Longest prefix + suffix the model was trained on (None: not recorded); servers should not exceed it.
    max_context_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.layout not in ("suffix_first", "prefix_first"):
            raise ValueError(f"infill layout must be 'suffix_first' or 'prefix_first', got {self.layout!r}")
        if not self.canvas_lengths or any(c <= 0 for c in self.canvas_lengths):
            raise ValueError(f"canvas_lengths must be positive, got {self.canvas_lengths}")
        if self.max_context_tokens is not None and self.max_context_tokens < 8:
            raise ValueError(f"max_context_tokens must be >= 8, got {self.max_context_tokens}")

    def context_budget(self, requested: int) -> int:
        """The prompt budget to use: what the client asked for, capped at what the model was trained on."""
        return requested if self.max_context_tokens is None else min(requested, self.max_context_tokens)

    def context(self, prefix_ids: list[int], suffix_ids: list[int], hole: HoleInfo | None = None) -> list[int]:
        """The encoder context; the FIM layout needs nothing of the hole but where it is."""
        if self.layout == "suffix_first":
            return [self.bos_id, self.fim_suffix_id, *suffix_ids, self.fim_prefix_id, *prefix_ids, self.fim_middle_id]
        return [self.bos_id, self.fim_prefix_id, *prefix_ids, self.fim_suffix_id, *suffix_ids, self.fim_middle_id]

    def answer(self, text: str, prefix: str = "", suffix: str = "") -> str:
        """A FIM canvas is the code for the hole as it is."""
        return text

    @classmethod
    def load(cls, checkpoint: Path, tokenizer: Tokenizer | None, **special: int) -> InfillFormat:
        """infill.json's layout and lengths. With a tokenizer, the FIM ids are read from it and a tokenizer without
        all three is an error; without one (training code) the ids are this project's SPECIAL_TOKENS layout.
        `special` sets bos_id / eos_id / pad_id (from the checkpoint's config)."""
        path = Path(checkpoint) / INFILL_FILE
        raw = json.loads(path.read_text()) if path.exists() else {}
        ids: dict[str, int] = dict(special)
        if tokenizer is not None:
            fim = fim_token_ids(tokenizer)
            if fim is None:
                wanted = " / ".join(s[0] for s in FIM_SPELLINGS.values())
                raise PromptFormatError(
                    f"the fim prompt format needs FIM tokens ({wanted}, or the <|fim_...|> spellings) in "
                    f"{Path(checkpoint) / 'tokenizer.json'}, which does not have all three")
            ids.update(fim)
        return cls(
            layout=raw.get("layout", "suffix_first"),
            canvas_lengths=tuple(raw.get("canvas_lengths", (16, 32, 64))),
            max_context_tokens=raw.get("max_context_tokens"),
            **ids,
        )

    def save(self, checkpoint: Path) -> None:
        body = {"layout": self.layout, "canvas_lengths": list(self.canvas_lengths)}
        if self.max_context_tokens is not None:
            body["max_context_tokens"] = self.max_context_tokens
        (Path(checkpoint) / INFILL_FILE).write_text(json.dumps(body, indent=2) + "\n")
