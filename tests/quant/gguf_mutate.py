"""Broken copies of a good GGUF file, and the worker of tests/quant/test_gguf_fuzz.py.

`BREAKS`: named damage (a cut file, a tensor offset past the end, a zero or absurd dimension, a metadata string
longer than the file), each written by patching the good file's header fields where gguf's GGUFReader finds them,
with the one-line refusal it must get (tests/quant/test_gguf_refusals.py).

The worker loads `n` byte-mutated copies of a good file through the engine's GGUF path (open, metadata, tensor set,
tensors) in this process and prints one JSON line: how each ended. A native crash kills this process, which the test
sees; an exception other than a clear refusal is reported with its input.

    python -m tests.quant.gguf_mutate GOOD.gguf N SEED WORKDIR
"""

from __future__ import annotations

import json
import random
import struct
import sys
from collections.abc import Callable
from pathlib import Path

from engine.formats import gguf as G


def _fields(good: Path) -> tuple[dict[str, dict[str, int]], int]:
    """tensor name -> byte positions of its header fields ("dims": the first u64 dim, "offset"), and the position
    of the first metadata key's u64 length; read with gguf's own reader."""
    from gguf import GGUFReader

    reader = GGUFReader(good)
    where = {}
    for t in reader.tensors:
        parts = t.field.parts  # name length, name, n_dims, dims, type, offset
        at = [t.field.offset]
        for p in parts:
            at.append(at[-1] + p.nbytes)
        where[t.name] = {"dims": at[3], "offset": at[5]}
    first_key = min(f.offset for name, f in reader.fields.items() if not name.startswith("GGUF."))
    return where, first_key


def _u64(data: bytearray, at: int, value: int) -> bytes:
    data[at:at + 8] = struct.pack("<Q", value)
    return bytes(data)


def _n(x: int) -> str:
    return f"{x:,}"


def cut_in_half(good: Path) -> tuple[bytes, str]:
    from engine.formats.gguf_layout import check_layout

    data = good.read_bytes()
    size = len(data) // 2
    hit = next(t for t in check_layout(good) if t.start + t.nbytes > size)
    return data[:size], (f"truncated: tensor {hit.name} needs bytes {_n(hit.start)}..{_n(hit.start + hit.nbytes)}, "
                         f"the file has {_n(size)}")


def offset_past_end(good: Path, name: str = "blk.1.ffn_gate.weight") -> tuple[bytes, str]:
    where, _ = _fields(good)
    data = bytearray(good.read_bytes())
    return _u64(data, where[name]["offset"], len(data) * 4 // 32 * 32), (
        f"tensor {name}: its data offset points past the end of the file")


def zero_dimension(good: Path, name: str = "token_embd.weight") -> tuple[bytes, str]:
    where, _ = _fields(good)
    data = bytearray(good.read_bytes())  # dims[1] of the embedding: the vocabulary
    return _u64(data, where[name]["dims"] + 8, 0), f"tensor {name} has a zero dimension: shape (0, "


def absurd_dimension(good: Path, name: str = "blk.0.attn_q.weight") -> tuple[bytes, str]:
    where, _ = _fields(good)
    data = bytearray(good.read_bytes())
    return _u64(data, where[name]["dims"] + 8, 1 << 40), f"tensor {name} has absurd dimensions: shape (1099511627776,"


def string_past_end(good: Path) -> tuple[bytes, str]:
    _, first_key = _fields(good)
    data = bytearray(good.read_bytes())
    return _u64(data, first_key, 1 << 50), "truncated header: metadata key #0 (1,125,899,906,842,624 bytes) needs bytes"


BREAKS: dict[str, Callable[[Path], tuple[bytes, str]]] = {
    "cut_in_half": cut_in_half, "offset_past_end": offset_past_end, "zero_dimension": zero_dimension,
    "absurd_dimension": absurd_dimension, "string_past_end": string_past_end,
}


def load(path: Path) -> None:
    info = G.open_gguf(path)
    cfg = G.checkpoint_config(info)
    G.check_tensor_set(info, cfg.text)
    for _, _, read in G.tensors(path, cfg.text):
        read()


def main() -> None:
    good, n, seed, work = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    data, rng = good.read_bytes(), random.Random(seed)
    ends: dict[str, int] = {}
    for i in range(n):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):  # flip bytes, mostly in the header and metadata where parsing happens
            at = rng.randrange(min(len(data), 4096) if rng.random() < 0.8 else len(data))
            mutated[at] = rng.randrange(256)
        if rng.random() < 0.2:
            del mutated[rng.randrange(len(mutated)):]
        path = work / "current.gguf"
        path.write_bytes(bytes(mutated))
        (work / "current.txt").write_text(str(i))  # the input that was running, if this process dies
        try:
            load(path)
            ends["loaded"] = ends.get("loaded", 0) + 1
        except (G.GGUFError, ValueError) as exc:  # GGUFError is a ValueError; other ValueErrors are tolerated
            kind = "GGUFError" if isinstance(exc, G.GGUFError) else type(exc).__name__
            ends[kind] = ends.get(kind, 0) + 1
        except Exception as exc:  # noqa: BLE001 -- the test fails on these, with the input
            print(json.dumps({"unclear": f"{type(exc).__name__}: {exc}"[:500], "mutation": i, "ends": ends}))
            return
    print(json.dumps({"ends": ends}))


if __name__ == "__main__":
    main()
