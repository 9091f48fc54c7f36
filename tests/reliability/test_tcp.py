"""`--tcp`: loopback by default, a token for anything else, IPv6 hosts, and one server per connection."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys

import pytest

from bench.rawlsp import connect_tcp, server_env, sha256
from dg_lsp.wire.tcp import TOKEN_MIN, parse_host_port, required_token

TOKEN = "t0k3n-" + "x" * TOKEN_MIN
INIT = {"processId": None, "rootUri": None, "capabilities": {}}


def free_port(family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dg_lsp", *args], env=env or server_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop(proc: subprocess.Popen) -> str:
    """Kill the server; what it logged."""
    proc.kill()
    _, err = proc.communicate()
    return err.decode(errors="replace")


@pytest.mark.parametrize("value, expected", [("7777", ("127.0.0.1", 7777)), (":7777", ("127.0.0.1", 7777)),
                                             ("[::1]:7777", ("::1", 7777)), ("[::]:7777", ("::", 7777)),
                                             ("0.0.0.0:80", ("0.0.0.0", 80)), ("localhost:1", ("localhost", 1))])
def test_hosts_and_ports_parse(value, expected):
    assert parse_host_port(value) == expected


@pytest.mark.parametrize("value", ["::1:7777", "[::1]", "[::1]7777", "host:0", "host:70000", "host:x", ""])
def test_bad_hosts_and_ports_are_refused(value):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_host_port(value)


def test_a_token_is_needed_off_loopback_and_must_be_long_enough():
    assert required_token("127.0.0.1", None, {}) is None
    assert required_token("::1", None, {}) is None
    assert required_token("localhost", None, {}) is None
    for host in ("0.0.0.0", "::", "192.0.2.7"):
        with pytest.raises(ValueError, match="--token-env"):
            required_token(host, None, {})
    with pytest.raises(ValueError, match="not set"):
        required_token("0.0.0.0", "DG_TOKEN", {})
    with pytest.raises(ValueError, match="fewer than"):
        required_token("0.0.0.0", "DG_TOKEN", {"DG_TOKEN": "short"})
    assert required_token("0.0.0.0", "DG_TOKEN", {"DG_TOKEN": TOKEN}) == TOKEN
    assert required_token("127.0.0.1", "DG_TOKEN", {"DG_TOKEN": TOKEN}) == TOKEN  # asked for: required


@pytest.mark.parametrize("args, says", [(["--tcp", "0.0.0.0:{port}"], "--token-env"),
                                        (["--tcp", "[::]:{port}"], "--token-env"),
                                        (["--tcp", "0.0.0.0:{port}", "--token-env", "DG_UNSET_TOKEN"], "not set"),
                                        (["--tcp", "::1:{port}"], "brackets"),
                                        (["--token-env", "DG_UNSET_TOKEN"], "--tcp")])
def test_the_server_refuses_to_start_exposed_with_a_clear_message(args, says):
    port = free_port()
    out = subprocess.run([sys.executable, "-m", "dg_lsp", *(a.format(port=port) for a in args)], env=server_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr
    with socket.socket() as s:  # nothing listens
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_off_loopback_every_connection_must_send_the_token_first():
    port = free_port(host="0.0.0.0")
    proc = start("--tcp", f"0.0.0.0:{port}", "--token-env", "DG_TEST_TOKEN",
                 env={**server_env(), "DG_TEST_TOKEN": TOKEN})
    try:
        for first in ({"id": 1, "method": "initialize", "params": INIT},
                      {"id": 1, "method": "initialize", "params": {**INIT, "initializationOptions": {"token": "no"}}},
                      {"method": "initialized", "params": {}},
                      {"id": 1, "method": "dg/documentState", "params": {"textDocument": {"uri": "file:///a"}}}):
            client, sock = connect_tcp("127.0.0.1", port)
            with sock:
                if "id" in first:
                    client.request(first["method"], first["params"], first["id"])
                else:
                    client.notify(first["method"], first["params"])
                refused = client.wait(lambda m: "error" in m, 15)
                assert refused is not None and refused["error"]["code"] == -32600
                assert "unauthorized" in refused["error"]["message"] and TOKEN not in refused["error"]["message"]
                assert client.wait(lambda m: False, 5) is None and client.closed  # and the server hung up
        client, sock = connect_tcp("127.0.0.1", port)
        with sock:
            got = client.call("initialize", {**INIT, "initializationOptions": {"token": TOKEN, "debounceMs": 0}}, 15)
            assert got is not None and got["result"]["serverInfo"]["name"] == "dg-lsp"
            assert client.serving()
            warnings = [m for m in client.messages if m.get("method") == "window/showMessage"]
            assert not warnings, warnings  # the token was taken out before the settings were read
    finally:
        log = stop(proc)
    assert TOKEN not in log and "unauthorized" in log


def test_each_connection_has_its_own_server_on_ipv6_loopback():
    port = free_port(socket.AF_INET6, "::1")
    proc = start("--tcp", f"[::1]:{port}")
    try:
        a, sock_a = connect_tcp("::1", port)
        a.initialize()
        a.open("file:///secret-a.py", "password = 1\n")
        assert a.state("file:///secret-a.py", 15)["result"]["sha256"] == sha256("password = 1\n")
        b, sock_b = connect_tcp("::1", port)
        with sock_a, sock_b:
            early = b.call("dg/documentState", {"textDocument": {"uri": "file:///secret-a.py"}}, 15)
            assert early["error"]["code"] == -32002  # b has not initialized: its own lifecycle
            b.initialize()
            assert b.state("file:///secret-a.py", 15)["error"]["code"] == -32602  # not b's document
            for _ in range(3):  # a keeps its answers after b connected
                assert a.state("file:///secret-a.py", 15)["result"]["version"] == 1
            a.notify("exit")
            assert a.wait(lambda m: False, 5) is None and a.closed
            assert b.serving()
            assert not any("secret-a" in str(m.get("params", "")) or "secret-a" in str(m.get("result", ""))
                           for m in b.messages)
    finally:
        stop(proc)
