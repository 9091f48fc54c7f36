"""The tokenizer a DiffusionGemma GGUF carries in its `tokenizer.ggml.*` metadata, rebuilt as a `tokenizers.Tokenizer`
(for a file with no HF tokenizer.json beside it), and the same metadata written from a tokenizer.json.

llama.cpp's converter (`Gemma4Model.set_vocab`, via gguf's LlamaHfVocab) stores the vocabulary by id, each token's
type (NORMAL 1, CONTROL 3, USER_DEFINED 4, BYTE 6 for `<0xNN>`), placeholder scores, and the BPE merges verbatim,
with `tokenizer.ggml.model = "gemma4"`. The normalizer, pre-tokenizer and decoder are not stored: they are Gemma's,
as transformers' GemmaTokenizer (its GGUF path for "gemma4") builds them: spaces become "▁", BPE with byte fallback,
no pre-split, the decoder undoes both. CONTROL tokens become special added tokens, USER_DEFINED plain added ones.
Token ids equal the HF tokenizer's where the HF tokenizer is this pipeline (../shared/GGUF.md §4; tested on a
Gemma-style tokenizer, not on the published one, which is not at hand).

A byte-level BPE (this project's shipped model) is stored as `tokenizer.ggml.model = "gpt2"` with
`tokenizer.ggml.pre = "gpt-2"`, as llama.cpp spells it (`src/llama-vocab.cpp`, the converter's `get_vocab_base_pre`;
the GPT-2 split regex, which is tokenizers' ByteLevel `use_regex`); files that say "gpt2" (this project's writer
before) read the same. It is rebuilt as ByteLevel BPE. llama.cpp's "qwen2" (Qwen2/Dream vocabularies) is rebuilt as
Qwen2's tokenizer.json declares it: NFC, a Split by Qwen2's regex (isolated), ByteLevel without its own regex. Other
pre-tokenizers (llama-bpe, ...) split differently and are refused by name. The gemma4 kind carries no
`tokenizer.ggml.pre` (Gemma4Model.set_vocab writes none).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NORMAL, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 3, 4, 5, 6
GPT2_PRE = ("gpt-2", "gpt2", None)  # llama.cpp's name first; "gpt2" as this project wrote it before; none given
# llama.cpp's "qwen2" pre-tokenizer (Qwen2 / Dream vocabularies): Qwen2's tokenizer.json splits with this regex
# (Split, isolated) and then maps bytes (ByteLevel without its own regex), after an NFC normalizer
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")


class GGUFTokenizerError(ValueError):
    """The file's tokenizer metadata is missing or of a kind this module does not rebuild."""


def unsupported(fields: dict[str, Any]) -> str | None:
    """Why the metadata holds no tokenizer this module rebuilds, or None when it holds one (gemma4: what
    DiffusionGemma files hold; gpt2 with the gpt-2 pre-tokenizer)."""
    kind, pre = fields.get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.pre")
    if "tokenizer.ggml.tokens" not in fields:
        return "the GGUF has no tokenizer.ggml.tokens"
    if kind == "gemma4" or (kind == "gpt2" and (pre in GPT2_PRE or pre == "qwen2")):
        return None
    return (f"tokenizer.ggml.model {kind!r} (pre {pre!r}) is not rebuilt here (gemma4, and gpt2 with pre gpt-2 or "
            "qwen2, are)")


def has_tokenizer(fields: dict[str, Any]) -> bool:
    """Whether the metadata holds a tokenizer this module rebuilds."""
    return unsupported(fields) is None


def tokenizer_from_fields(fields: dict[str, Any], where: str = "the GGUF"):
    """`tokenizers.Tokenizer` from a GGUF's metadata (engine.formats.gguf.GGUFInfo.fields)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    why = unsupported(fields)
    if why is not None:
        raise GGUFTokenizerError(f"{where}: {why}; put the model's HF tokenizer.json beside the file")
    gemma = fields["tokenizer.ggml.model"] == "gemma4"
    tokens = list(fields["tokenizer.ggml.tokens"])
    types = list(fields.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens))
    merges = [tuple(m.split(" ", 1)) for m in fields.get("tokenizer.ggml.merges") or []]
    if len(types) != len(tokens):
        raise GGUFTokenizerError(f"{where}: {len(types)} token types for {len(tokens)} tokens")
    # UNUSED rows (the converter's `[PAD{i}]` up to the embedding's size) are no token: ids HF's tokenizer lacks
    vocab = {t: i for i, (t, ty) in enumerate(zip(tokens, types, strict=True)) if ty != UNUSED}
    unk_id = fields.get("tokenizer.ggml.unknown_token_id")
    if gemma:
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, fuse_unk=True,
                                   unk_token=tokens[unk_id] if unk_id is not None else None))
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    else:  # byte-level: every byte has a symbol, no unk, no fallback
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        if fields.get("tokenizer.ggml.pre") == "qwen2":
            tok.normalizer = normalizers.NFC()
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
        else:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types, strict=True) if ty == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(tokens, types, strict=True) if ty == USER_DEFINED])
    return tok


def tokenizer_fields(tokenizer_json: Path) -> dict[str, Any]:
    """The `tokenizer.ggml.*` keys llama.cpp's converter writes for an HF BPE tokenizer.json (tests, benchmarks)."""
    raw = json.loads(tokenizer_json.read_text())
    model = raw["model"]
    if model.get("type") != "BPE":
        raise GGUFTokenizerError(f"{tokenizer_json}: model type {model.get('type')!r} is not BPE")
    by_id = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in raw.get("added_tokens", [])}
    by_id.update({i: a["content"] for i, a in added.items()})
    n = max(by_id) + 1
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(n)]
    types = []
    for i, t in enumerate(tokens):
        if i in added:
            types.append(CONTROL if added[i].get("special") else USER_DEFINED)
        elif t.startswith("<0x") and t.endswith(">") and len(t) == 6:
            types.append(BYTE)
        else:
            types.append(NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    ids = {t: i for i, t in enumerate(tokens)}
    gemma = model.get("byte_fallback") and (raw.get("normalizer") or {}).get("type") == "Replace"
    kind = "gemma4" if gemma else "gpt2"  # a byte-level BPE: what the converter writes for one
    split = raw.get("pre_tokenizer") or {}
    byte_level = split.get("type") == "ByteLevel" and split.get("use_regex", True)
    out: dict[str, Any] = {"tokenizer.ggml.model": kind, "tokenizer.ggml.tokens": tokens,
                           "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges}
    if gemma:  # Gemma4Model.set_vocab: LlamaHfVocab's placeholder scores, no pre-tokenizer name
        out["tokenizer.ggml.scores"] = [-1000.0] * n
    else:  # _set_vocab_gpt2: the pre-tokenizer by name ("default": a split this module does not rebuild), no scores
        out["tokenizer.ggml.pre"] = "gpt-2" if byte_level else "default"
    for key, name in (("bos_token_id", "<bos>"), ("eos_token_id", "<eos>"), ("unknown_token_id", "<unk>"),
                      ("padding_token_id", "<pad>"), ("mask_token_id", "<mask>")):
        if name in ids:
            out[f"tokenizer.ggml.{key}"] = ids[name]
    return out
