"""A command's log: stderr gets one line per record, naming the log file where a traceback went
(engine.tools.command.setup_logging); the log file appears only when something is written to it."""

from __future__ import annotations

import subprocess
import sys

from cli_harness import TIMEOUT_S, child_env

SCRIPT = """
import logging, sys
from pathlib import Path
from engine.tools.command import setup_logging
setup_logging("WARNING", Path(sys.argv[1]))
logging.getLogger("dg").info("not shown")
try:
    open("/no/such/checkpoint/config.json")
except OSError:
    logging.getLogger("dg").exception("could not read the config")
"""


def test_a_logged_traceback_is_one_line_on_stderr_and_whole_in_the_log(tmp_path):
    log = tmp_path / "logs" / "cmd.log"
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], env=child_env(tmp_path), capture_output=True,
                         text=True, timeout=TIMEOUT_S)
    assert out.returncode == 0 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.endswith(f"ERROR dg: could not read the config: FileNotFoundError: [Errno 2] No such file or "
                         f"directory: '/no/such/checkpoint/config.json' (traceback in {log})")
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "not shown" not in text


def test_no_log_file_is_made_when_nothing_is_logged(tmp_path):
    log = tmp_path / "logs" / "cmd.log"
    out = subprocess.run([sys.executable, "-c", SCRIPT.split("try:")[0], str(log)], env=child_env(tmp_path),
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode == 0 and out.stderr == "" and not log.parent.exists()
