"""The `dg-lsp` command: serve LSP on stdio (default) or TCP, print the version, check the model, or run one of
the SUBCOMMANDS (serve-engine, calibrate, ...: the table below).

stdout belongs to the LSP stream, so every log line goes to stderr. Exit codes: LSP's (0 after shutdown and exit,
1 for exit without shutdown or a stream that ended first), 2 for a command line it refuses, each refusal in one line
(engine.tools.command; docs/PROTOCOL.md, "Command line").
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
import difflib  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from dg_lsp.memory import use_system_allocator  # noqa: E402
from dg_lsp.sched import short_slice  # noqa: E402
from dg_lsp.wire.tcp import parse_host_port, required_token, serve_tcp  # noqa: E402

# The subcommands, one line each: name -> ("module:function", what it does). The function gets the arguments after
# the name and returns the exit code (`main(argv: list[str]) -> int`). A new subcommand is one line here, nothing else.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve-engine": ("engine.service.cli:main", "serve one model to every editor on this machine (or a team)"),
    "calibrate": ("engine.tools.calibrate:main", "measure the confidence gate's threshold for a checkpoint"),
    "doctor": ("engine.tools.doctor:main", "a report to paste in an issue: versions, device, plan, self-checks"),
}
CHECK_ONLY = ("device", "workspace", "weights", "prompt_format")  # flags that mean something only with --check


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from engine.tools.command import Parser

    commands = "\n".join(f"  {name:<14}{what}" for name, (_, what) in SUBCOMMANDS.items())
    p = Parser(prog="dg-lsp", usage="dg-lsp [options]\n       dg-lsp COMMAND [--help] ...",
               formatter_class=argparse.RawDescriptionHelpFormatter,
               description="Language server that fills code holes with a text-diffusion LLM. With no arguments it "
               "serves LSP on stdin/stdout (an editor starts it).",
               epilog=f"commands:\n{commands}\n\n`dg-lsp COMMAND --help` shows a command's options.")
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
                   help="load the model, fill one canvas, print one JSON object, exit 0 (it works) or 1")
    p.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"],
                   help="with --check: where the model runs (default auto: cuda when available)")
    p.add_argument("--workspace", metavar="DIR", default=None, type=Path,
                   help="with --check: also index DIR as the server indexes a workspace (context from other files)")
    p.add_argument("--weights", default=None, choices=["auto", "bf16", "int8", "int4", "fp8"],
                   help="with --check: how to store the weights (default auto: the checkpoint's own format, else the "
                        "widest that fits the device)")
    p.add_argument("--prompt-format", default=None, choices=["auto", "fim", "chat"],
                   help="with --check: the prompt format (default auto: fim when declared, else chat)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="stderr log level (default WARNING)")
    p.add_argument("--log-file", metavar="PATH", default=None, type=Path,
                   help="write the log (with tracebacks) to PATH; stderr then gets one line per record (--check "
                   "logs to ~/.cache/dg-lsp/logs/check.log by default)")
    args = p.parse_args(argv)
    if not args.check:
        given = [f"--{name.replace('_', '-')}" for name in CHECK_ONLY if getattr(args, name) is not None]
        if given:
            p.error(f"{', '.join(given)} only mean{'s' if len(given) == 1 else ''} something with --check")
    return args


def check(args: argparse.Namespace) -> int:
    """Load the model, show its prompt for a sample hole, fill one canvas; one JSON object on stdout (and the
    error, if any, as one line on stderr). A workspace is indexed only when --workspace names one."""
    from engine.tools.command import Refused

    workspace = args.workspace
    if workspace is not None and not workspace.is_dir():
        raise Refused(f"--workspace {workspace}: not a directory")
    from engine.tools.check import run_check

    out = run_check(args.model, device=args.device or "auto", weights=args.weights or "auto",
                    prompt_format=args.prompt_format or "auto")
    if workspace is not None:
        from dg_lsp.context.workspace import check_summary  # context from other files: the workspace's index

        out["crossFile"] = check_summary(workspace.resolve())
    print(json.dumps(out))
    if not out["ok"]:
        print(f"dg-lsp --check: {out.get('error')}", file=sys.stderr)
    return 0 if out["ok"] else 1


def subcommand(argv: list[str]) -> int | None:
    """Run the subcommand `argv[0]` names (SUBCOMMANDS); None when it names none."""
    entry = SUBCOMMANDS.get(argv[0]) if argv else None
    if entry is None:
        return None
    module, _, function = entry[0].partition(":")
    run: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return run(argv[1:])


def unknown_command(word: str) -> str:
    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1)
    hint = f"did you mean `dg-lsp {close[0]}`? " if close else ""
    return f"dg-lsp: error: unknown command {word!r} ({hint}commands: {', '.join(SUBCOMMANDS)}; see dg-lsp --help)"


GIL_SWITCH_S = 0.0005


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the command line (not a caller in this process): memory goes back after closes
        use_system_allocator(sys.argv[1:])  # dg_lsp.memory; re-executes once, or returns
    argv = sys.argv[1:] if argv is None else argv
    code = subcommand(argv)
    if code is not None:
        return code
    if argv and not argv[0].startswith("-"):
        print(unknown_command(argv[0]), file=sys.stderr)
        return 2
    args = parse_args(argv)
    if args.check or args.log_file is not None:  # one line per record on stderr, tracebacks in the file
        from engine.tools.command import log_path, setup_logging

        setup_logging(args.log_level, args.log_file or (log_path("check") if args.check else None))
    else:  # the LSP server: stderr is the editor's log, tracebacks included
        logging.basicConfig(stream=sys.stderr, level=args.log_level,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = None
    if args.token_env is not None and not args.tcp:
        print("dg-lsp: error: --token-env goes with --tcp", file=sys.stderr)
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
        from engine.tools.command import log_path, run

        return run("dg-lsp --check", lambda: check(args), args.log_file or log_path("check"))
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
    if sys.stdin.isatty():  # a person typed `dg-lsp`: say what it waits for, rather than seem to hang
        print("dg-lsp: serving LSP on stdin/stdout (an editor starts it; Ctrl-D ends; dg-lsp --help lists the "
              "options)", file=sys.stderr, flush=True)
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
