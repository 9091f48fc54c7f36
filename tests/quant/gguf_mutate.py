"""Worker of tests/quant/test_gguf_fuzz.py: load `n` byte-mutated copies of a good GGUF file through the engine's
GGUF path (open, metadata, tensor set, tensors) in this process. Prints one JSON line: how each ended. A native
crash kills this process, which the test sees; an exception other than a clear refusal is reported with its input.

    python -m tests.quant.gguf_mutate GOOD.gguf N SEED WORKDIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from engine.formats import gguf as G


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
