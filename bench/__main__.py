"""`python -m bench`: every benchmark, one line each, grouped by what it measures (bench/registry.py's table).

    python -m bench                  # the list
    python -m bench NAME [ARGS...]   # runs it: the same as `python -m bench.NAME ARGS...` (bench/NAME for a .sh)
    python -m bench --helpers        # the list, and the helper modules with the benchmarks they serve
"""

from __future__ import annotations

import runpy
import subprocess
import sys

from bench.registry import BENCHES, GROUPS, HELPERS, find, present


def listing(helpers: bool = False) -> str:
    rows = present(BENCHES)
    width = max(len(b.name) for b in rows)
    out = ["Benchmarks: python -m bench NAME [ARGS...]  (NAME --help: its options; --quick: a seconds-long",
           "code-path check, not a measurement). Each prints a table; its last line is one JSON object.", ""]
    for group, what in GROUPS.items():
        out.append(f"{group}: {what}")
        out += [f"  {b.name:<{width}}  {b.line}" for b in rows if b.group == group]
        out.append("")
    if helpers:
        out.append("helpers (no command of their own):")
        hwidth = max(len(h.name) for h in HELPERS)
        out += [f"  {h.name:<{hwidth}}  for {h.serves}" for h in HELPERS]
    return "\n".join(out).rstrip()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "--helpers", "list"):
        if argv[:1] in (["-h"], ["--help"]):
            print(__doc__.strip(), end="\n\n")
        print(listing(helpers=argv[:1] == ["--helpers"]))
        return 0
    bench = find(argv[0])
    if bench is None:
        names = ", ".join(b.name for b in present(BENCHES))
        print(f"bench: no benchmark called {argv[0]!r} (python -m bench lists them: {names})", file=sys.stderr)
        return 2
    if bench.name.endswith(".sh"):
        return subprocess.call(["bash", str(bench.path), *argv[1:]])
    sys.argv = [str(bench.path), *argv[1:]]
    runpy.run_module(f"bench.{bench.name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
