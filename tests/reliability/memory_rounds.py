"""Open and close many large documents through the real server, round after round, and read its RSS (issue 21, item
3): memory must return near its baseline whatever way the documents were parsed (the server parses a big file in
1 ms slices in the background).

`python -m tests.reliability.memory_rounds [--docs 200] [--kb 200] [--rounds 3]` prints one JSON line with the
figures (the issue's scale by default); tests/reliability/test_memory_rounds.py runs it small.

Figures (MB above the baseline after closing, rounds 1/2/3; 200 x 200 KB hold ~2,235 MB while open):
- 24 docs: 61.3 / 100.5 / 154.1 before issue 21's fixes, 37.1 / 47.1 / 61.1 after.
- 200 docs: 212.8 / 282.0 / 325.3 after them. What stays is pymalloc fragmentation: py-tree-sitter allocates trees
  with PyMem_Malloc, and the few Python objects that outlive a round sit in the arenas the trees freed. The same run
  with PYTHONMALLOC=malloc and one malloc_trim(0) after the last close: 4.7 / 6.1 / 7.1 (PYTHONMALLOC=malloc alone:
  nothing goes back, 2,335 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from dg_lsp.memory import TRIM_AFTER_S
from tests.reliability.conftest import RawServer, pos

# Each template fills a document of one language; `{i}` and `{k}` make every line of every document distinct, so no
# two documents share text (nothing to intern, nothing for tree-sitter to reuse).
TEMPLATES = {
    "python": "def f{i}_{k}(a, b=None):\n    x = [a, b, {k}, 'é{k}']\n    return g(x) + \"s{i}\"  # c{k}\n\n",
    "javascript": "function f{i}_{k}(a, b) {{\n  const x = [a, b, {k}, 'é{k}'];\n  return g(x) + `s{i}`;\n}}\n",
    "go": "func f{i}_{k}(a int) int {{\n\tx := []int{{a, {k}}}\n\treturn g(x) // c{i}\n}}\n",
    "c": "int f{i}_{k}(int a) {{\n    int x[] = {{a, {k}}};\n    return g(x, \"s{i}\");\n}}\n",
}


def document(i: int, size: int, language: str) -> str:
    template, out, n, k = TEMPLATES[language], [], 0, 0
    while n < size:
        piece = template.format(i=i, k=k)
        out.append(piece)
        n, k = n + len(piece.encode()), k + 1
    return "".join(out)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def settle(srv: RawServer, quiet_s: float = 0.6, timeout_s: float = 300.0) -> None:
    """Wait until the server has answered a request sent now (every message before it handled) and then used no CPU
    for `quiet_s` (its background reparses done)."""
    srv.call("textDocument/codeAction", {"textDocument": {"uri": "file:///warm.py"}, "range": {
        "start": pos(0, 0), "end": pos(0, 0)}, "context": {"diagnostics": []}})
    deadline = time.monotonic() + timeout_s
    last = cpu_seconds(srv.proc.pid)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = cpu_seconds(srv.proc.pid)
        if now - last < 0.02:
            return
        last = now
    raise TimeoutError("the server kept working")


def rounds(srv: RawServer, docs: int, size: int, n_rounds: int) -> dict:
    """Open `docs` documents of `size` bytes (languages in turn), let their parses finish, close them all; repeat.
    RSS in MB: the baseline, while open and after closing, per round."""
    srv.open("file:///warm.py", "def f(x):\n    return x\n", "python")
    settle(srv)
    langs = list(TEMPLATES)
    texts = [(f"file:///big/d{i}.{langs[i % len(langs)][:2]}", langs[i % len(langs)],
              document(i, size, langs[i % len(langs)])) for i in range(docs)]
    baseline = srv.rss_mb()
    held, after = [], []
    for _ in range(n_rounds):
        for uri, language, text in texts:
            srv.open(uri, text, language)
        settle(srv)
        held.append(round(srv.rss_mb() - baseline, 1))
        srv.send(*(srv.notification("textDocument/didClose", {"textDocument": {"uri": uri}}) for uri, _, _ in texts))
        settle(srv)
        time.sleep(TRIM_AFTER_S + 0.5)  # the server gives freed memory back once no close came for TRIM_AFTER_S
        settle(srv)
        after.append(round(srv.rss_mb() - baseline, 1))
    return {"docs": docs, "doc_kb": size // 1000, "rounds": n_rounds, "baseline_mb": round(baseline, 1),
            "open_above_baseline_mb": held, "closed_above_baseline_mb": after}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--kb", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", type=Path, default=None, help="checkpoint (default: a tiny random one in a temp dir)")
    args = ap.parse_args()
    model = args.model
    if model is None:
        import tempfile

        from engine.testing.tiny import build_tiny_checkpoint

        model = build_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", "mixed", canvas_length=16)
    srv = RawServer(model)
    try:
        srv.initialize({"debounceMs": 0, "steps": 2})
        print(json.dumps(rounds(srv, args.docs, args.kb * 1000, args.rounds)))
    finally:
        srv.close()


if __name__ == "__main__":
    main()
