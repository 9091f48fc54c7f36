"""`python -m MODULE --help` for every module of dg_lsp/ and engine/ that runs as a program: exit 0, its usage printed,
nothing written where it ran (`python -m engine.formats.gguf_write --help` once wrote a GGUF into a folder named
`--help`)."""

from __future__ import annotations

import pytest
from cli_harness import ROOT, run


def entry_points() -> list[str]:
    found = []
    for package in ("dg_lsp", "engine"):
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            if path.name == "__main__.py" or 'if __name__ == "__main__"' in text:
                parts = path.relative_to(ROOT).with_suffix("").parts
                found.append(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
    return found


def test_the_walk_finds_the_known_entry_points():
    assert {"dg_lsp", "engine.service", "engine.formats.gguf_write", "dg_lsp.devtools.demo"} <= set(entry_points())


@pytest.mark.parametrize("module", entry_points())
def test_help_prints_usage_and_writes_nothing(tmp_path, module):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = run(["--help"], tmp_path, module=module, cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: "), out.stdout[:200]
    assert list(cwd.iterdir()) == []
