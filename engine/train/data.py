"""Training examples and batches: hole -> suffix-first context cut at line boundaries + canvas (middle, eos, pads)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from tokenizers import Tokenizer

from engine.tokens import InfillFormat
from engine.train.corpus import SourceFile
from engine.train.holes import DEFAULT_KIND_WEIGHTS, KINDS, FileHoles, Hole, pick_kind, python_parser


@dataclass(frozen=True)
class DataConfig:
    """Context and canvas budgets of training examples (the server must keep the same budgets at inference)."""

    context_tokens: int = 128  # whole encoder context, sentinels included
    suffix_tokens: int = 32  # at most this many suffix tokens; the prefix gets the rest
    canvas_lengths: tuple[int, ...] = (16, 32, 64)
    canvas_weights: tuple[float, ...] = (0.5, 0.3, 0.2)
    kind_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_KIND_WEIGHTS))
    batch_size: int = 16  # encoded contexts per batch

    def __post_init__(self) -> None:
        if self.suffix_tokens < 0 or self.context_tokens < self.suffix_tokens + 8:
            raise ValueError("context_tokens must exceed suffix_tokens by at least 8")
        if len(self.canvas_lengths) != len(self.canvas_weights) or min(self.canvas_lengths) < 2:
            raise ValueError("canvas_lengths and canvas_weights must pair up; canvases hold >= 2 tokens")
        if set(self.kind_weights) - set(KINDS) or sum(self.kind_weights.values()) <= 0:
            raise ValueError(f"kind_weights keys must be among {KINDS}")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")


@dataclass
class Example:
    context: list[int]  # suffix-first context
    middle: list[int]  # true middle tokens (no eos)
    kind: str


@dataclass
class Batch:
    context: torch.Tensor  # (B, L) left-padded with pad ids
    attention_mask: torch.Tensor  # (B, L) 1 on real tokens
    canvas: torch.Tensor  # (B, C) clean canvas: middle, eos, pads
    kinds: list[str]


def cut_prefix(tok: Tokenizer, prefix: str, budget: int) -> list[int]:
    """Tokens of the longest tail of `prefix` that starts at a line start and fits `budget` (the cursor line's
    text before the hole is always kept; it is cut by tokens only when it alone exceeds the budget)."""
    if budget <= 0:
        return []
    window = prefix[-budget * 12 :]
    if len(window) < len(prefix):  # window starts mid-line: drop the partial first line
        nl = window.find("\n")
        window = window[nl + 1 :] if nl >= 0 else window
    ids = tok.encode(window).ids
    while len(ids) > budget:
        nl = window.find("\n")
        if nl < 0:
            return ids[-budget:]
        window = window[nl + 1 :]
        ids = tok.encode(window).ids
    return ids


def cut_suffix(tok: Tokenizer, suffix: str, budget: int) -> list[int]:
    """Tokens of the longest head of `suffix` that ends at a line end (newline included) and fits `budget`."""
    if budget <= 0:
        return []
    window = suffix[: budget * 12]
    if len(window) < len(suffix):
        nl = window.rfind("\n")
        window = window[: nl + 1] if nl >= 0 else window
    ids = tok.encode(window).ids
    while len(ids) > budget:
        nl = window.rfind("\n", 0, max(len(window) - 1, 0))
        if nl < 0:
            return ids[:budget]
        window = window[: nl + 1]
        ids = tok.encode(window).ids
    return ids


def make_example(tok: Tokenizer, fmt: InfillFormat, text: str, hole: Hole, cfg: DataConfig) -> Example:
    prefix, middle, suffix = hole.split(text)
    suffix_ids = cut_suffix(tok, suffix, cfg.suffix_tokens)
    prefix_ids = cut_prefix(tok, prefix, cfg.context_tokens - 4 - len(suffix_ids))
    return Example(fmt.context(prefix_ids, suffix_ids), tok.encode(middle).ids, hole.kind)


def canvas_ids(middle: list[int], length: int, fmt: InfillFormat) -> list[int]:
    """middle + <eos> + pads, exactly `length` ids."""
    if len(middle) + 1 > length:
        raise ValueError(f"middle of {len(middle)} tokens does not fit a {length}-token canvas")
    return [*middle, fmt.eos_id] + [fmt.pad_id] * (length - len(middle) - 1)


def collate(examples: list[Example], canvas_length: int, fmt: InfillFormat) -> Batch:
    width = max(len(e.context) for e in examples)
    ctx = torch.full((len(examples), width), fmt.pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        ctx[i, width - len(e.context) :] = torch.tensor(e.context)
        mask[i, width - len(e.context) :] = 1
    canvas = torch.tensor([canvas_ids(e.middle, canvas_length, fmt) for e in examples], dtype=torch.long)
    return Batch(ctx, mask, canvas, [e.kind for e in examples])


class HoleDataset:
    """Draws examples from a list of files; batch `step` is a pure function of (seed, step), so runs resume exactly."""

    def __init__(
        self, files: list[SourceFile], tok: Tokenizer, fmt: InfillFormat, cfg: DataConfig, seed: int = 0
    ) -> None:
        self.files, self.tok, self.fmt, self.cfg, self.seed = files, tok, fmt, cfg, seed
        self.weights = [f.size for f in files]
        self.parser = python_parser()
        self._holes: dict[int, FileHoles] = {}

    def holes_of(self, index: int) -> FileHoles:
        if index not in self._holes:
            self._holes[index] = FileHoles(self.files[index].read(), self.parser)
        return self._holes[index]

    def sample(self, rng: random.Random, max_middle: int, kind: str | None = None) -> tuple[Example, int, Hole]:
        """One example whose middle has at most `max_middle` tokens; returns it with its file index and hole."""
        for _ in range(1000):
            index = rng.choices(range(len(self.files)), weights=self.weights)[0]
            k = kind or pick_kind(rng, self.cfg.kind_weights)
            fh = self.holes_of(index)
            hole = fh.sample(k, rng)
            if hole is None:
                continue
            ex = make_example(self.tok, self.fmt, fh.text, hole, self.cfg)
            if 0 < len(ex.middle) <= max_middle:
                return ex, index, hole
        raise RuntimeError("no hole fits; is the corpus empty?")

    def batch(self, step: int) -> Batch:
        rng = random.Random(self.seed * 1_000_003 + step)
        c = rng.choices(self.cfg.canvas_lengths, weights=self.cfg.canvas_weights)[0]
        examples = [self.sample(rng, c - 1)[0] for _ in range(self.cfg.batch_size)]
        return collate(examples, c, self.fmt)
