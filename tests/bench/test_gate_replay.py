"""bench.gate_replay: a shown fill goes where the server puts it, through the server's post-processing, and a fill that
still breaks the file is counted (Python's parser, and tree-sitter's error count, on the whole file)."""

from __future__ import annotations

import pytest

from bench import gate_replay
from bench.gate_replay import replay, statement_cost

TABLE = ("import codecs\n\nencoding_map = {\n"
         + "".join(f"    0x{i:04x}: 0x{i:04x},     #  ENTRY {i}\n" for i in range(300)) + "}\n")


def row(text: str, before: str, middle: str, fill: str, confidence: float | None) -> dict:
    """A held-out hole after `before` whose text was `middle`, and the fill the engine gave it."""
    return {"file": "encodings/table.py", "start": text.index(before) + len(before), "middle": middle,
            "server": {"fill": fill, "confidence": confidence}}


ROWS = [
    row(TABLE, "    0x0096: ", "", "0x00ator,", 0.95),  # breaks the file beyond the syntax gate's window
    row(TABLE, "    0x0097: 0x0097,", "", "  # kept", 0.95),
    row(TABLE, "    0x0098: 0x0098,", "", "  # unseen", 0.5),  # below the gate: not shown, not replayed
]


def test_the_gate_lets_no_fill_that_breaks_the_file_through():
    for request in ("keystroke", "command"):
        out = replay(ROWS, {"encodings/table.py": TABLE}, 0.9, log=False)[request]
        assert (out["shown_after_postprocess"], out["syntax_breaks"], out["tree_sitter_breaks"]) == (1, 0, 0)


@pytest.mark.parametrize("request_kind", ["keystroke", "command"])
def test_a_fill_that_breaks_the_file_is_counted(monkeypatch, request_kind):
    monkeypatch.setattr(gate_replay, "postprocess", lambda snap, hole, fill, check, budget: fill)  # no gate at all
    out = replay(ROWS, {"encodings/table.py": TABLE}, 0.9, log=False)[request_kind]
    assert (out["shown_after_postprocess"], out["syntax_breaks"]) == (2, 1)
    # `0x00ator`: an integer then a name, an ERROR node for tree-sitter, in a file that had none
    assert out["tree_sitter_breaks"] == out["tree_sitter_breaks_clean"] == 1


def test_the_statement_check_cost_is_measured_on_the_holes_it_touches():
    out = statement_cost(ROWS, {"encodings/table.py": TABLE}, reps=1)
    assert (out["holes"], out["touched"]) == (3, 3) and out["added_cpu_ms_max"] is not None
