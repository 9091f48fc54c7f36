"""Emacs with eglot (Debian's emacs-nox 28.2 + elpa-eglot 1.9) against the real dg-lsp server and the shipped
model: fill, rewrite selection, edit-then-fill, completion after a partial word, a declined edit, and one undo for
each, in the utf-8, utf-16 and utf-32 position encodings.

`emacs --batch` runs editors/emacs/dg-eglot-test.el, which calls eglot's own commands as a user does
(`C-u M-x eglot-code-actions` with the region, or with no region the symbol at point as eglot sends it) and
writes one JSON line per scenario; the assertions are here. Eglot 1.9 counts columns in UTF-16 only and does not
negotiate an encoding: for utf-8 and utf-32 the driver offers it in `general.positionEncodings` and counts columns
in it, as Emacs 29's eglot does; each run checks that the server chose the encoding asked for.

Fills are not judged, only where they land. The document is plain text (eglot's languageId "text": no grammar, so
no syntax gate can reject a fill) and the shipped model's fills there are deterministic and non-empty; a
scenario that gets `applied: false` fails with the server's reason.

Without emacs or eglot the tests fail naming the package under `make test` (which installs both as root), and
skip when pytest is run by hand (tests/editors/tiers.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.editors.tiers import missing

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "editors" / "emacs" / "dg-eglot-test.el"
ENCODINGS = ("utf-16", "utf-8", "utf-32")
SCENARIOS = "fill rewrite edit-then-fill complete decline"
# Non-ASCII before every position the scenarios use, so a column counted in the wrong encoding lands elsewhere.
TEXT = "shopping 🍐 list\n- apples 梨\n- 梨 pears\n- 🍑 plums\n"
ANSWER_S = 120  # the longest wait for one answer (model load on a busy 2-core machine)


def find_emacs() -> tuple[str | None, str]:
    emacs = shutil.which("emacs")
    if emacs is None:
        return None, "emacs not installed (apt-get install -y emacs-nox elpa-eglot)"
    try:
        out = subprocess.run([emacs, "--batch", "-q", "--eval", "(progn (require 'eglot) (princ \"eglot\"))"],
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"emacs did not run: {e}"
    if out.stdout != "eglot":
        return None, "eglot not installed for this emacs (apt-get install -y elpa-eglot)"
    return emacs, ""


EMACS, WHY_NOT = find_emacs()
pytestmark = pytest.mark.editor


@pytest.fixture(scope="module")
def emacs() -> str:
    if EMACS is None:
        missing(WHY_NOT)
    assert EMACS is not None
    return EMACS


@pytest.fixture(scope="module")
def session(emacs, tmp_path_factory):
    """`session(encoding)`: the scenarios' records (scenario name -> JSON object) of one emacs run in that
    encoding; each encoding runs once per module, in whatever order the tests come."""
    runs: dict[str, dict[str, dict]] = {}

    def run(encoding: str) -> dict[str, dict]:
        if encoding not in runs:
            runs[encoding] = run_emacs(emacs, tmp_path_factory.mktemp(f"emacs-{encoding}"), encoding)
        return runs[encoding]

    return run


def run_emacs(emacs: str, tmp: Path, encoding: str) -> dict[str, dict]:
    doc, out = tmp / "notes.txt", tmp / "out.jsonl"
    doc.write_text(TEXT, encoding="utf-8")
    env = dict(os.environ, HOME=str(tmp), LANG="C.UTF-8", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               CUDA_VISIBLE_DEVICES="", DG_TEST_PYTHON=sys.executable, DG_TEST_FILE=str(doc), DG_TEST_OUT=str(out),
               DG_TEST_ENCODING=encoding, DG_TEST_SCENARIOS=SCENARIOS, DG_TEST_TIMEOUT=str(ANSWER_S),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([emacs, "--batch", "-q", "-l", str(DRIVER), "-f", "dg-test-main"], cwd=tmp, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=ANSWER_S * 5)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] if out.exists() else []
    by_name = {r["scenario"]: r for r in records}
    assert "connected" in by_name, proc.stderr[-3000:]
    return by_name


def scenario(session, encoding: str, name: str) -> dict:
    record = session(encoding)[name]
    assert "error" not in record, f"{name} ({encoding}): {record['error']}"
    return record


def assert_lands_at(record: dict, start: int, end: int) -> str:
    """The text changed only between `start` and `end` (character offsets into `before`): what went in there."""
    before, filled = record["before"], record["filled"]
    assert record.get("result", {}).get("applied", True) is True, record["result"]
    assert filled != before, f"nothing was applied: {record.get('result')}"
    head, tail = before[:start], before[end:]
    assert filled.startswith(head) and filled.endswith(tail) and len(filled) >= len(head) + len(tail), (
        f"the edit is not at {start}..{end}: {before!r} -> {filled!r}")
    return filled[len(head): len(filled) - len(tail)]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_server_speaks_the_encoding_and_advertises_the_kinds(session, encoding):
    record = session(encoding)["connected"]
    assert record["positionEncoding"] == encoding
    assert set(record["codeActionKinds"]) >= {"quickfix", "refactor.rewrite"}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_fill_with_no_region_lands_at_the_cursor_and_one_undo_reverts_it(session, encoding):
    record = scenario(session, encoding, "fill")
    start = record["start"]
    assert record["before"][slice(*record["sentRange"])] == "plums"  # eglot sent the symbol at point ...
    assert record["titles"] == ["Fill hole"]  # ... which is the cursor, not a selection to rewrite
    assert assert_lands_at(record, start, start)
    assert record["undone"] == record["before"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_rewrite_replaces_exactly_the_selection_and_one_undo_reverts_it(session, encoding):
    record = scenario(session, encoding, "rewrite")
    assert record["titles"] == ["Fill hole", "Rewrite selection"]
    assert record["before"][record["start"]:record["end"]] == "- apples 梨\n- 梨 pears"
    assert_lands_at(record, record["start"], record["end"])
    assert record["undone"] == record["before"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_fill_after_typing_goes_after_the_typed_word(session, encoding):
    record = scenario(session, encoding, "edit-then-fill")
    before, cursor = record["before"], record["start"]
    assert before[:cursor].endswith("list sum(val")
    assert before[slice(*record["sentRange"])] == "val"
    assert record["titles"] == ["Fill hole"]  # no "Rewrite selection" of `val`
    assert assert_lands_at(record, cursor, cursor)  # after `val`, not before it
    assert record["undone"] == before


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_completion_after_a_partial_word_survives_eglots_filter(session, encoding):
    record = scenario(session, encoding, "complete")
    assert record["probe"] == "val"
    assert record["found"] and all(item.startswith("val") for item in record["found"]), record["found"]
    cursor = record["start"]
    assert assert_lands_at(record, cursor, cursor)
    assert record["undone"] == record["before"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_declined_edit_is_applied_false_with_the_reason(session, encoding):
    record = scenario(session, encoding, "decline")
    assert record["asked"] is True and record["unchanged"] is True
    assert record["applied"] is False
    assert "User cancelled server edit" in record["reason"], record["reason"]
