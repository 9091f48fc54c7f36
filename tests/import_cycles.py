"""The import cycles of a module graph (module -> modules it imports), for the tests that hold a package free of
them (tests/engine/test_import_graph.py, tests/bench/test_bench_layout.py)."""

from __future__ import annotations


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle found by a depth-first walk, as the path that closes it ([a, b, a])."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                found.append(path[path.index(m):] + [m])
            elif m not in state:
                visit(m, path + [m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    return found
