"""The LSP lifecycle through a pipe: nothing but `initialize` (and `exit`) before it, one `initialize`, nothing but
`exit` after `shutdown`, and the exit codes LSP specifies."""

from __future__ import annotations

from bench.rawlsp import RawServer, sha256

TEXT = "x = 1\n"


def test_before_initialize_requests_get_server_not_initialized_and_notifications_are_dropped_and_once_only():
    with RawServer() as s:
        early = s.call("dg/documentState", {"textDocument": {"uri": "file:///early.py"}}, 15)
        assert early is not None and early["error"]["code"] == -32002
        shut = s.call("shutdown", None, 15)
        assert shut is not None and shut["error"]["code"] == -32002  # and it did not shut the server down
        s.open("file:///early.py", TEXT)  # dropped: not initialized
        s.notify("$/cancelRequest", {"id": 1})
        s.initialize()
        assert s.state("file:///early.py", 15)["error"]["code"] == -32602  # never opened
        s.open("file:///late.py", TEXT)
        assert s.state("file:///late.py", 15)["result"]["sha256"] == sha256(TEXT)
        again = s.call("initialize", {"processId": None, "rootUri": None, "capabilities": {}}, 15)
        assert again is not None and again["error"]["code"] == -32600
        assert s.serving()
        assert s.close() == 0


def test_after_shutdown_requests_are_invalid_and_exit_then_ends_with_code_0():
    with RawServer() as s:
        s.initialize()
        s.open("file:///a.py", TEXT)
        shut = s.call("shutdown", None, 15)
        assert shut is not None and shut["result"] is None and "error" not in shut
        late = s.state("file:///a.py", 15)
        assert late is not None and late["error"]["code"] == -32600
        again = s.call("shutdown", None, 15)
        assert again is not None and again["error"]["code"] == -32600
        s.notify("textDocument/didChange", {"textDocument": {"uri": "file:///a.py", "version": 2},
                                            "contentChanges": [{"text": "y = 2\n"}]})
        s.notify("exit")
        assert s.proc.wait(20) == 0


def test_exit_without_shutdown_ends_with_code_1():
    with RawServer() as s:
        s.initialize()
        assert s.serving()
        s.notify("exit")
        assert s.proc.wait(20) == 1


def test_exit_before_initialize_ends_with_code_1():
    with RawServer() as s:
        s.notify("exit")
        assert s.proc.wait(20) == 1


def test_a_stream_that_ends_ends_the_server_with_code_0_only_after_shutdown():
    with RawServer() as s:
        s.initialize()
        s.proc.stdin.close()  # the client went away without shutdown
        assert s.proc.wait(20) == 1
    with RawServer() as s:
        s.initialize()
        assert s.call("shutdown", None, 15)["result"] is None
        s.proc.stdin.close()
        assert s.proc.wait(20) == 0
