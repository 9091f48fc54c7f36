"""`dg-lsp serve-engine`: load the model once and serve it over HTTP (TCP on loopback, or a Unix socket).

    dg-lsp serve-engine [--host 127.0.0.1] [--port 8471] [--model DIR] [--api-key-env NAME] [--uds PATH]

Security: loopback by default; a non-loopback --host without an API key refuses to start. With --uds the socket
is created mode 0600 in a directory only this user may enter (else the service refuses), and a lock file beside
it keeps a second service off the same socket.

Start-up, in order: the command line; the socket (a busy port or a held socket is refused here); the checkpoint
(its folder, config and weight files' headers, not the weights: engine.tools.command.checked_model) and the device;
then "listening on ..." is printed and the model loads in the background, so `GET /health` answers ("loading")
while a large checkpoint loads. Each refusal is one line and a non-zero exit (engine.tools.command's codes: 2
refused, 3 already serving); a model that fails to load after that is said on /health for LOAD_FAIL_GRACE_S, in one
line on stderr, and the service exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.tools.command import (
    EXIT_FAILED,
    EXIT_RUNNING,
    EXIT_USAGE,  # noqa: F401 -- callers read the codes here too
    Parser,
    Refused,
    checked_model,
    log_path,
    run,
    setup_logging,
    write_traceback,
)

DEFAULT_PORT = 8471
PROG = "dg-lsp serve-engine"
LOAD_FAIL_GRACE_S = 2.0  # a model that fails to load after "listening": /health says why this long, then exit 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog=PROG, description="Serve one resident model to every editor "
                                "on this machine (or a team) over an OpenAI-compatible HTTP API.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other "
                   "address needs --api-key-env)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument("--uds", metavar="PATH", default=None, help="listen on this Unix socket instead of TCP")
    p.add_argument("--model", metavar="DIR", default=None, help="checkpoint directory (default: the shipped model)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--prompt-format", default="auto", choices=["auto", "fim", "chat"],
                   help="how holes are prompted (auto: fim when the checkpoint declares it, else its chat template)")
    p.add_argument("--api-key-env", metavar="NAME", default=None,
                   help="name of the environment variable holding the API key clients must send as a Bearer token")
    p.add_argument("--served-model-name", default=None, help="model id in the API (default: the directory name)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20)
    p.add_argument("--max-prompt-tokens", type=int, default=32768)
    p.add_argument("--max-canvas-length", type=int, default=1024)
    p.add_argument("--max-queue", type=int, default=64, help="clients that may wait at once (more get 429)")
    p.add_argument("--prefix-cache", type=int, default=16, help="contexts whose KV cache is kept (one per client "
                   "typing is what keeps each client's prefix warm)")
    p.add_argument("--idle-exit", type=float, default=0.0, metavar="SECONDS",
                   help="exit after this long without any request (0: never; auto-started services use it)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--log-file", metavar="PATH", type=Path, default=None,
                   help="the log in full, tracebacks included (default ~/.cache/dg-lsp/logs/serve-engine.log); "
                   "stderr gets one line per record")
    return p.parse_args(argv)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def private_dir_problem(directory: Path) -> str | None:
    """Why `directory` is not fit for a private socket (None: it is: ours, and no one else may enter it)."""
    try:
        st = directory.stat()
    except OSError as exc:
        return f"cannot use {directory}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid != os.getuid():
        return f"{directory} belongs to another user"
    if st.st_mode & 0o077:
        return f"{directory} is open to other users (mode {stat.S_IMODE(st.st_mode):o}; it must be 0700)"
    return None


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket created with mode 0600 (uvicorn's own --uds would make it 0666)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a stale socket of a service that died; we hold the lock, so no live one uses it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(128)
    return sock


def bind_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (bound here, before "listening" is printed: a busy port is one line)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT port of our own last run is free
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def load_into(state: Any, path: Path, device: str, dtype: str, prefix_cache: int, prompt_format: str,
              on_fail: Callable[[BaseException], None]) -> None:
    """The loading thread: load the checkpoint and attach it, or record why it failed and call `on_fail` (from
    inside the `except`, so it may log the traceback)."""
    try:
        import torch

        from engine.engine import Engine

        if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
            torch.set_num_threads(1)  # see dg_lsp.fill.worker.load_engine: small matrices, shared cores
        engine = Engine.from_pretrained(path, device=device, dtype=dtype, prefix_cache_size=prefix_cache,
                                        prompt_format=prompt_format)
        state.attach(engine, path)
        logging.getLogger(__name__).info("model %s loaded", path)
    except Exception as exc:  # noqa: BLE001 -- said on /health for LOAD_FAIL_GRACE_S, then the service exits 1
        # No log record here: on_fail says it in one line on stderr (a refused file and a bug alike) and writes the
        # traceback to the log file only.
        state.fail(f"{type(exc).__name__}: {exc}")
        on_fail(exc)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_file = args.log_file or log_path("serve-engine")
    setup_logging(args.log_level, log_file)
    return run(PROG, lambda: serve(args, log_file), log_file)


def serve(args: argparse.Namespace, log_file: Path) -> int:
    """Check, bind, announce, serve (the model loads in the background meanwhile); the exit code."""
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise Refused(f"--api-key-env {args.api_key_env}: that environment variable is not set or empty")
    if args.uds is None and not is_loopback(args.host) and key is None:
        raise Refused(f"refusing to listen on {args.host} without an API key: anyone who can reach it could use "
                      "the model. Set --api-key-env NAME (NAME holding the key), or use --host 127.0.0.1.")
    from engine.service.app import ServiceState, create_app
    from engine.service.requests import Limits

    try:
        limits = Limits(max_body_bytes=args.max_body_bytes, max_prompt_tokens=args.max_prompt_tokens,
                        max_canvas_length=args.max_canvas_length, max_queue=args.max_queue)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    with _listening(args) as sock:
        path = checked_model(args.model, args.device)
        import uvicorn

        state = ServiceState(limits=limits, api_key=key, served_name=args.served_model_name)
        state.model_path = path
        config = uvicorn.Config(create_app(state), log_level=args.log_level.lower(), access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2,
                                limit_concurrency=4 * limits.max_queue + 16)
        server = uvicorn.Server(config)

        def failed(exc: BaseException) -> None:  # the loading thread
            write_traceback(log_file, PROG)
            print(f"{PROG}: could not load the model {path}: {type(exc).__name__}: {str(exc).partition(chr(10))[0]} "
                  f"(traceback in {log_file})", file=sys.stderr, flush=True)
            time.sleep(LOAD_FAIL_GRACE_S)  # clients polling /health read why meanwhile
            server.should_exit = True

        threading.Thread(target=load_into, args=(state, path, args.device, args.dtype, args.prefix_cache,
                                                 args.prompt_format, failed), name="dg-service-load",
                         daemon=True).start()
        if args.idle_exit > 0:
            threading.Thread(target=_exit_when_idle, args=(server, state, args.idle_exit), daemon=True).start()
        # The engine thread holds the GIL between torch calls; each step's event waits for it on the loop thread. A
        # short switch interval keeps that hand-off under a millisecond (as dg_lsp/__main__.py does for the server).
        sys.setswitchinterval(0.0005)
        where = args.uds or f"http://{args.host}:{sock.getsockname()[1]}"
        print(f"{PROG}: listening on {where} (pid {os.getpid()})", file=sys.stderr, flush=True)
        try:
            server.run(sockets=[sock])
        finally:
            state.scheduler.stop()
    return 0 if server.started and state.state != "error" else EXIT_FAILED


@contextlib.contextmanager
def _listening(args: argparse.Namespace) -> Iterator[socket.socket]:
    """The bound socket (a Unix socket: under its lock, removed again at the end); refusals as Refused."""
    if args.uds is None:
        try:
            sock = bind_tcp(args.host, args.port)
        except OSError as exc:
            raise Refused(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
        with sock:
            yield sock
        return
    uds = Path(args.uds).absolute()
    problem = private_dir_problem(uds.parent)
    if problem:
        raise Refused(problem)
    import fcntl  # with --uds only: Unix (an auto-started service elsewhere is on loopback TCP with a key)

    with open(f"{uds}.lock", "a+") as lock:  # held (flock) for the life of the process
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(f"another engine service is already serving {uds}", EXIT_RUNNING) from None
        try:
            sock = bind_unix(uds)
        except OSError as exc:
            raise Refused(f"cannot listen on {uds}: {exc.strerror or exc}") from None
        try:
            with sock:
                yield sock
        finally:
            with contextlib.suppress(FileNotFoundError):
                uds.unlink()


def _exit_when_idle(server: Any, state: Any, idle_s: float) -> None:
    while not server.should_exit:
        time.sleep(min(1.0, idle_s))
        busy = state.scheduler.stats()
        if busy["queue"] == 0 and busy["running"] == 0 and time.monotonic() - state.last_request > idle_s:
            logging.getLogger(__name__).info("no request for %.0f s: exiting", idle_s)
            server.should_exit = True
