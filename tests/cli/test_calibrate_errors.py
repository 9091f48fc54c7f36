"""`dg-lsp calibrate` mistakes: one line and exit 2 before any hole is filled (they were 15-line tracebacks)."""

from __future__ import annotations

import pytest
from cli_harness import DEFAULT_MODEL, one_line, run


@pytest.mark.parametrize(("args", "says"), [
    (["--model", "/no/such/model"], "dg-lsp calibrate: --model /no/such/model: no such checkpoint"),
    (["--device", "cuda"], "dg-lsp calibrate: --device cuda: "),
    (["--holes", "0"], "dg-lsp calibrate: error: argument --holes: '0': at least 1"),
    (["--weights", "q3"], "dg-lsp calibrate: error: argument --weights: invalid choice: 'q3'"),
    (["--write", "--model", str(DEFAULT_MODEL / "model.safetensors")], "no such checkpoint"),
])
def test_a_mistake_is_one_line_and_exit_2(tmp_path, args, says):
    out = run(["calibrate", *args], tmp_path)
    assert out.returncode == 2 and says in one_line(out.stderr) and out.stdout == ""
