"""Build the byte-level BPE tokenizer of the default model from the training split of the corpus."""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenizers import Tokenizer

from engine.tokens import SPECIAL_TOKENS, train_bpe
from engine.train.corpus import read_manifest, scan, split, write_manifest


def build(files, vocab_size: int) -> Tokenizer:
    tok = train_bpe((f.read() for f in files if not f.held_out), vocab_size=vocab_size)
    for i, name in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(name) != i:
            raise RuntimeError(f"special token {name} got id {tok.token_to_id(name)}, expected {i}")
    return tok


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True, help="directory for tokenizer.json and manifest.json")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--manifest", type=Path, help="reuse this manifest instead of scanning the standard library")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    files = read_manifest(args.manifest, verify=True) if args.manifest else scan()
    write_manifest(files, args.out / "manifest.json")
    train, held = split(files)
    tok = build(train, args.vocab_size)
    tok.save(str(args.out / "tokenizer.json"))
    print(f"{len(train)} train files, {len(held)} held out; vocab {tok.get_vocab_size()} -> {args.out}")


if __name__ == "__main__":
    main()
