"""`dg-lsp doctor` as a user runs it: the subcommand of the server's command line, one JSON object with --json."""

from __future__ import annotations

import json
import subprocess
import sys

from server_harness import server_env


def test_doctor_json_on_this_machine(tiny_ckpt):
    r = subprocess.run([sys.executable, "-m", "dg_lsp", "doctor", "--json", "--model", str(tiny_ckpt), "--device",
                        "cpu"], capture_output=True, text=True, timeout=300, env=server_env())
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["ok"] is True and set(out) >= {"versions", "device", "plan", "self_checks", "fill", "floor", "seconds"}
    assert out["versions"]["dg-lsp"] and out["versions"]["torch"]
    assert out["self_checks"] == {**out["self_checks"], "device": "cpu", "checked": [], "fellBack": []}
    assert out["fill"]["steps"] >= 1 and out["floor"]["floor_ms_per_step"] > 0


def test_doctor_refuses_an_unknown_option():
    r = subprocess.run([sys.executable, "-m", "dg_lsp", "doctor", "--bogus"], capture_output=True, text=True,
                       timeout=120, env=server_env())
    assert r.returncode == 2 and "dg-lsp doctor" in r.stderr
