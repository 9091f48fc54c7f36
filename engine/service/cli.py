"""`dg-lsp serve-engine`: load the model once and serve it over HTTP (TCP on loopback, or a Unix socket).

    dg-lsp serve-engine [--host 127.0.0.1] [--port 8471] [--model DIR] [--api-key-env NAME] [--uds PATH]

Security: loopback by default; a non-loopback --host without an API key refuses to start. With --uds the socket
is created mode 0600 in a directory only this user may enter (else the service refuses), and a lock file beside
it keeps a second service off the same socket. The service binds first and loads the model in the background, so
`GET /health` answers ("loading") while a large checkpoint loads.
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
from pathlib import Path
from typing import Any

DEFAULT_PORT = 8471
EXIT_USAGE, EXIT_RUNNING = 2, 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dg-lsp serve-engine", description="Serve one resident model to every editor "
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


def load_into(state: Any, model: str | None, device: str, dtype: str, prefix_cache: int,
              prompt_format: str = "auto") -> None:
    """The loading thread: import torch, load the checkpoint, attach it (or record why it failed)."""
    try:
        import torch

        from engine.engine import Engine, default_model_path

        if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
            torch.set_num_threads(1)  # see dg_lsp.fill.worker.load_engine: small matrices, shared cores
        path = Path(model) if model else default_model_path()
        state.model_path = path
        engine = Engine.from_pretrained(path, device=device, dtype=dtype, prefix_cache_size=prefix_cache,
                                        prompt_format=prompt_format)
        state.attach(engine, path)
        logging.getLogger(__name__).info("model %s loaded", path)
    except Exception as exc:  # noqa: BLE001 -- reported on /health, the service stays up to say so
        logging.getLogger(__name__).exception("model load failed")
        state.fail(f"{type(exc).__name__}: {exc}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: "
                        "%(message)s")
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            print(f"dg-lsp serve-engine: --api-key-env {args.api_key_env}: that environment variable is not set "
                  "or empty", file=sys.stderr)
            return EXIT_USAGE
    if args.uds is None and not is_loopback(args.host) and key is None:
        print(f"dg-lsp serve-engine: refusing to listen on {args.host} without an API key: anyone who can reach "
              "it could use the model. Set --api-key-env NAME (NAME holding the key), or use --host 127.0.0.1.",
              file=sys.stderr)
        return EXIT_USAGE
    import uvicorn

    from engine.service.app import ServiceState, create_app
    from engine.service.requests import Limits

    try:
        limits = Limits(max_body_bytes=args.max_body_bytes, max_prompt_tokens=args.max_prompt_tokens,
                        max_canvas_length=args.max_canvas_length, max_queue=args.max_queue)
    except ValueError as exc:
        print(f"dg-lsp serve-engine: {exc}", file=sys.stderr)
        return EXIT_USAGE
    lock = sock = None
    if args.uds is not None:
        uds = Path(args.uds).absolute()
        problem = private_dir_problem(uds.parent)
        if problem:
            print(f"dg-lsp serve-engine: {problem}", file=sys.stderr)
            return EXIT_USAGE
        import fcntl  # with --uds only: Unix (an auto-started service elsewhere is on loopback TCP with a key)

        lock = open(f"{uds}.lock", "a+")  # noqa: SIM115 -- held (flock) for the life of the process
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"dg-lsp serve-engine: another engine service is already serving {uds}", file=sys.stderr)
            return EXIT_RUNNING
        sock = bind_unix(uds)
    state = ServiceState(limits=limits, api_key=key, served_name=args.served_model_name)
    state.model_path = Path(args.model) if args.model else None
    threading.Thread(target=load_into, args=(state, args.model, args.device, args.dtype, args.prefix_cache,
                                             args.prompt_format), name="dg-service-load", daemon=True).start()
    config = uvicorn.Config(create_app(state), host=args.host, port=args.port,
                            fd=sock.fileno() if sock is not None else None, log_level=args.log_level.lower(),
                            access_log=False, lifespan="off", timeout_graceful_shutdown=2,
                            limit_concurrency=4 * limits.max_queue + 16)
    server = uvicorn.Server(config)
    if args.idle_exit > 0:
        threading.Thread(target=_exit_when_idle, args=(server, state, args.idle_exit), daemon=True).start()
    # The engine thread holds the GIL between torch calls; each step's event waits for it on the loop thread. A
    # short switch interval keeps that hand-off under a millisecond (as dg_lsp/__main__.py does for the server).
    sys.setswitchinterval(0.0005)
    where = args.uds or f"http://{args.host}:{args.port}"
    print(f"dg-lsp serve-engine: listening on {where} (pid {os.getpid()})", file=sys.stderr, flush=True)
    try:
        server.run()
    finally:
        state.scheduler.stop()
        if args.uds is not None:
            with contextlib.suppress(FileNotFoundError):
                Path(args.uds).unlink()
    return 0 if server.started else 1


def _exit_when_idle(server: Any, state: Any, idle_s: float) -> None:
    while not server.should_exit:
        time.sleep(min(1.0, idle_s))
        busy = state.scheduler.stats()
        if busy["queue"] == 0 and busy["running"] == 0 and time.monotonic() - state.last_request > idle_s:
            logging.getLogger(__name__).info("no request for %.0f s: exiting", idle_s)
            server.should_exit = True
