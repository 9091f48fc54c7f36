"""The `dg-lsp` command: serve LSP on stdio (default) or TCP, print the version, or check the model.

stdout belongs to the LSP stream, so every log line goes to stderr. Exit codes: LSP's (0 after shutdown and exit,
1 for exit without shutdown or a stream that ended first), 2 for a command line it refuses.
"""

from __future__ import annotations

import os
import sys

# `python -m dg_lsp` puts the working directory first on sys.path, and an editor starts the server in the user's
# project: a project file named like a module the server imports (gguf.py, json.py, torch.py) would be imported in
# its place. Drop it, unless it is where this package lives (a checkout run in place).
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd() != os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))):
    del sys.path[0]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from dg_lsp.memory import use_system_allocator  # noqa: E402
from dg_lsp.sched import short_slice  # noqa: E402
from dg_lsp.wire.tcp import parse_host_port, required_token, serve_tcp  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dg-lsp", description="Language server that fills code holes with a "
                                "text-diffusion LLM. With no arguments it serves LSP on stdio; "
                                "`dg-lsp serve-engine` serves one model to every editor on the machine.")
    p.add_argument("--tcp", metavar="[HOST:]PORT", type=parse_host_port,
                   help="serve on TCP instead of stdio (HOST defaults to 127.0.0.1; IPv6 as [::1]:PORT); a host that "
                   "is not loopback needs --token-env")
    p.add_argument("--token-env", metavar="NAME", default=None,
                   help="with --tcp: clients must send the token held in environment variable NAME as "
                   "initializationOptions.token (at least 16 characters)")
    p.add_argument("--model", metavar="PATH", default=None,
                   help="checkpoint used while the client's modelPath is null (default: the shipped model)")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--check", action="store_true",
                   help="load the model, fill one canvas, print JSON, exit 0/1")
    p.add_argument("--weights", default="auto", choices=["auto", "bf16", "int8", "int4", "fp8"],
                   help="with --check: how to store the weights (default auto: the checkpoint's own format, else the "
                        "widest that fits the device)")
    p.add_argument("--prompt-format", default="auto", choices=["auto", "fim", "chat"],
                   help="with --check: the prompt format (default auto: fim when declared, else chat)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="stderr log level (default WARNING)")
    return p.parse_args(argv)


def check(model: str | None, weights: str = "auto", prompt_format: str = "auto") -> int:
    """Load the model, show its prompt for a sample hole, fill one canvas; one JSON object on stdout."""
    from engine.tools.check import run_check

    out = run_check(model, weights=weights, prompt_format=prompt_format)
    from dg_lsp.context.workspace import check_summary  # context from other files: the index of the cwd

    out["crossFile"] = check_summary(Path.cwd())
    print(json.dumps(out))
    return 0 if out["ok"] else 1


GIL_SWITCH_S = 0.0005


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the command line (not a caller in this process): memory goes back after closes
        use_system_allocator(sys.argv[1:])  # dg_lsp.memory; re-executes once, or returns
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["calibrate"]:  # the confidence gate's threshold for a checkpoint (engine/tools/calibrate.py)
        from engine.tools.calibrate import main as calibrate

        return calibrate(argv[1:])
    if argv[:1] == ["doctor"]:  # versions, device, plan, self-checks, a timed fill (engine/tools/doctor.py)
        from engine.tools.doctor import main as doctor

        return doctor(argv[1:])
    if argv[:1] == ["serve-engine"]:  # the shared engine service (engine/service/cli.py)
        from engine.service.cli import main as serve_engine

        return serve_engine(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = None
    if args.token_env is not None and not args.tcp:
        print("dg-lsp: --token-env goes with --tcp", file=sys.stderr)
        return 2
    if args.tcp:
        try:
            token = required_token(args.tcp[0], args.token_env, os.environ)
        except ValueError as e:
            print(f"dg-lsp: {e}", file=sys.stderr)
            return 2
    from dg_lsp.server import build_server, server_version

    if args.version:
        print(f"dg-lsp {server_version()}")
        return 0
    if args.check:
        return check(args.model, args.weights, args.prompt_format)
    # The engine thread holds the GIL between torch calls; when it hands a result back, the loop would wait up
    # to the default 5 ms switch interval for the GIL. A short interval keeps that hand-off under a millisecond.
    sys.setswitchinterval(GIL_SWITCH_S)
    short_slice()  # this thread runs the event loop (dg_lsp.sched)
    if args.tcp:
        try:
            asyncio.run(serve_tcp(lambda: build_server(default_model=args.model), *args.tcp, token))
        except OSError as e:  # the address is taken or cannot be bound
            print(f"dg-lsp: cannot listen on {args.tcp[0]}:{args.tcp[1]}: {e.strerror or e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            pass
        return 0
    from dg_lsp.wire.stdio import serve_stdio

    server = build_server(default_model=args.model)
    return leave(server.worker, serve_stdio(server))


ENGINE_STOP_S = 5.0


def leave(worker: Any, code: int) -> int:
    """`code`, once the engine thread has ended; if it does not within ENGINE_STOP_S, the process ends at once.

    The thread is a daemon, and one still inside torch when the interpreter finalizes is ended by pthread_exit as it
    takes the GIL back, in torch's C++ frames: "terminate called without an active exception", SIGABRT (the native
    crash bench.reliability counted at a server's shutdown; `exit` right after `shutdown` with a fill running did it
    every time). A cancelled job stops within one step; a model load does not stop, so then the process leaves
    without finalizing (os._exit, after flushing what it wrote)."""
    worker.shutdown()  # again after the `shutdown` request: harmless; the first when the client just went away
    if worker.wait_stopped(ENGINE_STOP_S):
        return code
    logging.getLogger(__name__).warning("the engine thread is still busy after %.0f s: exiting without cleanup",
                                        ENGINE_STOP_S)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):  # `exit` closed stdout
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
