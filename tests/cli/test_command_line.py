"""`dg-lsp`'s command line: --help lists the subcommands; a flag that means something only with --check, an unknown
command or flag, a --token-env without --tcp: each refused in one line with exit 2, before anything loads."""

from __future__ import annotations

import socket

import pytest
from cli_harness import run

from dg_lsp.__main__ import SUBCOMMANDS


def test_help_lists_every_subcommand(tmp_path):
    out = run(["--help"], tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("usage: dg-lsp")
    for name in ("serve-engine", "calibrate", *SUBCOMMANDS):
        assert f"\n  {name}" in out.stdout, name
    assert "--check" in out.stdout and "--device" in out.stdout and "--workspace" in out.stdout


@pytest.mark.parametrize("flag", [["--weights", "int8"], ["--prompt-format", "fim"], ["--device", "cpu"],
                                  ["--workspace", "."]])
def test_a_flag_that_needs_check_is_refused_without_it(tmp_path, flag):
    out = run(flag, tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == f"dg-lsp: error: {flag[0]} only means something with --check (see dg-lsp --help)"


@pytest.mark.parametrize(("args", "says"), [
    (["serve"], "unknown command 'serve'"),
    (["calibrat"], "did you mean `dg-lsp calibrate`?"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--tcp", "nope"], "argument --tcp"),
    (["--token-env", "X"], "--token-env goes with --tcp"),
    (["--check", "--workspace", "/no/such/dir"], "--workspace /no/such/dir: not a directory"),
])
def test_a_mistake_is_one_line_and_exit_2(tmp_path, args, says):
    out = run(args, tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and says in lines[0], out.stderr


def test_a_busy_tcp_port_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run(["--tcp", str(port)], tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0]
    assert "address already in use" in lines[0]
