"""The `dg-lsp` command: serve LSP on stdio (default) or TCP, print the version, or check the model.

stdout belongs to the LSP stream, so every log line goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    try:
        n = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected [HOST:]PORT, got {value!r}") from None
    if not 0 < n < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {n}")
    return host or "127.0.0.1", n


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dg-lsp", description="Language server that fills code holes with a "
                                "text-diffusion LLM. With no arguments it serves LSP on stdio; "
                                "`dg-lsp serve-engine` serves one model to every editor on the machine.")
    p.add_argument("--tcp", metavar="[HOST:]PORT", type=_host_port,
                   help="serve on TCP instead of stdio (HOST defaults to 127.0.0.1)")
    p.add_argument("--model", metavar="PATH", default=None,
                   help="checkpoint used while the client's modelPath is null (default: the shipped model)")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--check", action="store_true",
                   help="load the model, fill one canvas, print JSON, exit 0/1")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="stderr log level (default WARNING)")
    return p.parse_args(argv)


def check(model: str | None) -> int:
    """Load the model, show its prompt for a sample hole, fill one canvas; one JSON object on stdout."""
    from engine.check import run_check

    out = run_check(model)
    print(json.dumps(out))
    return 0 if out["ok"] else 1


GIL_SWITCH_S = 0.0005


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve-engine"]:  # the shared engine service (engine/service/cli.py)
        from engine.service.cli import main as serve_engine

        return serve_engine(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # pygls logs every message body at INFO; keep that for DEBUG only.
    logging.getLogger("pygls").setLevel(logging.DEBUG if args.log_level == "DEBUG" else logging.WARNING)
    from dg_lsp.server import build_server, server_version

    if args.version:
        print(f"dg-lsp {server_version()}")
        return 0
    if args.check:
        return check(args.model)
    server = build_server(default_model=args.model)
    # The engine thread holds the GIL between torch calls; when it hands a result back, the loop would wait up
    # to the default 5 ms switch interval for the GIL. A short interval keeps that hand-off under a millisecond.
    sys.setswitchinterval(GIL_SWITCH_S)
    if args.tcp:
        server.start_tcp(*args.tcp)
    else:
        server.start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
