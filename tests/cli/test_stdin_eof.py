"""`dg-lsp` whose input ends: exit 1 at once (LSP: the stream ended before `shutdown`), one line on stderr, no
traceback. `dg-lsp </dev/null` once printed an asyncio traceback and waited forever (epoll refuses /dev/null)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

from cli_harness import TIMEOUT_S, child_env, run


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


INITIALIZE = frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"processId": None, "rootUri": None, "capabilities": {}}})


def test_dev_null_exits_1_with_one_line(tmp_path):
    out = run([], tmp_path)  # stdin is /dev/null
    assert out.returncode == 1 and out.stdout == ""
    assert "the input was empty" in out.stderr and "an editor starts it" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_input_ending_mid_session_exits_1_with_one_line(tmp_path):
    out = run([], tmp_path, stdin=INITIALIZE)  # initialize, then the client goes away
    assert out.returncode == 1
    assert '"id": 1' in out.stdout and '"capabilities"' in out.stdout  # it was answered first
    assert "the input ended before shutdown" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_a_regular_file_as_input_is_read_to_its_end(tmp_path):
    messages = tmp_path / "session.lsp"
    messages.write_bytes(INITIALIZE + frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
                         + frame({"jsonrpc": "2.0", "method": "exit"}))
    with open(messages, "rb") as f:
        out = run([], tmp_path, stdin=f.fileno())
    assert out.returncode == 0, out.stderr
    assert '"id": 2' in out.stdout and "Traceback" not in out.stderr


def test_typed_at_a_terminal_it_says_what_it_waits_for_and_ctrl_d_ends_it(tmp_path):
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dg_lsp"], stdin=secondary, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env(tmp_path), cwd=tmp_path, text=True)
    os.close(secondary)
    try:
        os.write(primary, b"\x04")  # Ctrl-D: the terminal's end of input
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
        os.close(primary)
    assert proc.returncode == 1 and out == "" and "Traceback" not in err
    first, second = err.strip().splitlines()
    assert first.startswith("dg-lsp: serving LSP on stdin/stdout (an editor starts it; Ctrl-D ends")
    assert "the input was empty" in second
