"""Auto-start of the engine service: one per user, machine and model, on a Unix socket only this user can reach
(or, where Unix sockets or `fcntl` locks are missing, as on Windows: on loopback TCP behind a random token).

The socket, its lock and the service's log live in `$XDG_RUNTIME_DIR/dg-lsp` (else `~/.cache/dg-lsp`), a
directory of mode 0700. Starting takes `start.lock` (flock), so windows opening together start one service: the
first spawns it, detached in its own session, and waits until it answers `/health` (it binds before it loads the
model); the others then find it answering. The service holds `<socket>.lock` for its whole life as well, so even a
start that bypassed `start.lock` cannot put a second service on the socket.

Without them: `engine-<key>.json` (mode 0600, made on first use) holds a loopback port and a random token; the
service is started on that port with the token as its API key (`--api-key-env`: it refuses requests without it), and
every window reads the same file, so they share one service and a restart comes back on the same port.
`start.lock` is then a lock file made with O_EXCL, taken over when older than a start can take.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dg_lsp

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

IDLE_EXIT_S = 120  # the service exits this long after the last request (every connected client polls /health)
START_TIMEOUT_S = 60.0  # until the spawned service answers /health (imports and bind, not the model load)
RESPAWN_GAP_S = 5.0  # at least this long between two spawns by one client (a service that keeps dying)
TOKEN_ENV = "DG_ENGINE_TOKEN"  # the auto-started TCP service's API key, handed over in its environment


def unix_sockets() -> bool:
    """Unix sockets and flock, as the socket rendezvous needs (Linux, macOS; not Windows)."""
    return hasattr(socket, "AF_UNIX") and fcntl is not None


def runtime_dir() -> Path:
    """The private directory for sockets and locks (created 0700; refused if another user owns it)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    d = Path(base) / "dg-lsp" if base and Path(base).is_dir() else Path.home() / ".cache" / "dg-lsp"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():  # Windows: the profile's folders are the user's own
        raise PermissionError(f"{d} belongs to another user; the engine service socket must be private")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    return d


def _key(model_path: str | None, device: str, dtype: str, prompt_format: str) -> str:
    model = str(Path(model_path).expanduser().resolve()) if model_path else "default"
    return hashlib.sha256(f"{model}|{device}|{dtype}|{prompt_format}".encode()).hexdigest()[:12]


def socket_path(model_path: str | None, device: str, dtype: str, prompt_format: str = "auto") -> Path:
    """The socket of the service for this model, device, dtype and prompt format (windows agreeing on them share
    it)."""
    return runtime_dir() / f"engine-{_key(model_path, device, dtype, prompt_format)}.sock"


@dataclass(frozen=True)
class LocalService:
    """Where this user's auto-started service for a model listens: `uds`, or `url` with `token` (loopback TCP).
    `base`: the socket or endpoint file; its log and lock sit beside it."""

    base: Path
    url: str
    uds: str | None = None
    token: str | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def local_service(model_path: str | None, device: str, dtype: str, prompt_format: str = "auto") -> LocalService:
    """The service for this model, device, dtype and prompt format: on a Unix socket where there are Unix sockets
    and flock, else on loopback TCP (its port and token made once, in a 0600 file, shared by every window)."""
    if unix_sockets():
        sock = socket_path(model_path, device, dtype, prompt_format)
        return LocalService(sock, "http://dg-engine", uds=str(sock))
    path = runtime_dir() / f"engine-{_key(model_path, device, dtype, prompt_format)}.json"
    with _locked(path.parent / "start.lock", START_TIMEOUT_S):
        try:
            found = json.loads(path.read_text())
            port, token = int(found["port"]), str(found["token"])
        except (OSError, ValueError, KeyError, TypeError):  # none yet (or unreadable): a new port and token
            port, token = _free_port(), secrets.token_urlsafe(32)
            _write_private(path, json.dumps({"port": port, "token": token}))
    return LocalService(path, f"http://127.0.0.1:{port}", token=token)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable by this user only (0600), replaced whole (never seen half-written)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[None]:
    """`path` held exclusively (flock; without fcntl an O_EXCL lock file, see the module docstring)."""
    if fcntl is None:
        with _lock_file(path, timeout_s):
            yield
        return
    with open(path, "a+") as f:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path} stayed locked for {timeout_s:.0f} s") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _lock_file(path: Path, timeout_s: float) -> Iterator[None]:
    """A lock that is a file: made with O_EXCL, removed on release. One left by a process that died is taken over
    once older than any holder keeps it (a start: START_TIMEOUT_S and a respawn gap)."""
    stale_s = START_TIMEOUT_S + RESPAWN_GAP_S + 10
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            break
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > stale_s:
                    path.unlink()
                    continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} stayed locked for {timeout_s:.0f} s") from None
            time.sleep(0.05)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


class AutoStart:
    """Starts `python -m engine.service --uds SOCK ...` when nothing answers on SOCK (with `tcp`, a LocalService
    on loopback TCP: `--port PORT --api-key-env DG_ENGINE_TOKEN` instead)."""

    def __init__(self, sock: Path, model_path: str | None, device: str, dtype: str,
                 prompt_format: str = "auto", tcp: LocalService | None = None) -> None:
        self.sock = sock
        self.log_path = sock.with_suffix(".log")
        where = (["--uds", str(sock)] if tcp is None else
                 ["--host", "127.0.0.1", "--port", str(tcp.port), "--api-key-env", TOKEN_ENV])
        self.token = tcp.token if tcp is not None else None
        self.argv = [sys.executable, "-m", "engine.service", *where, "--idle-exit", str(IDLE_EXIT_S),
                     "--device", device, "--dtype", dtype, "--prompt-format", prompt_format, "--log-level", "INFO"]
        if model_path:
            self.argv += ["--model", str(Path(model_path).expanduser().resolve())]
        self._procs: list[subprocess.Popen[bytes]] = []
        self._last_spawn = 0.0

    def ensure(self, ping: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> bool:
        """Make sure a service answers on the socket; True if this call started it. Raises if it cannot."""
        self.reap()
        if ping():
            return False
        with _locked(self.sock.parent / "start.lock", timeout_s):
            if ping():
                return False
            wait = self._last_spawn + RESPAWN_GAP_S - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            proc = self._spawn()
            deadline = time.monotonic() + timeout_s
            while not ping():
                if proc.poll() is not None:
                    raise RuntimeError(f"the engine service exited with status {proc.returncode} while starting: "
                                       f"{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the engine service did not answer on {self.sock} within {timeout_s:.0f} s "
                                       f"(log: {self.log_path})")
                time.sleep(0.05)
        return True

    def _spawn(self) -> subprocess.Popen[bytes]:
        self._last_spawn = time.monotonic()
        root = str(Path(dg_lsp.__file__).resolve().parent.parent)  # where `engine` is importable from
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        if self.token is not None:
            env[TOKEN_ENV] = self.token
        # Detached: its own session (POSIX), or its own process group without a console (Windows; 0 elsewhere).
        flags = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0) | getattr(subprocess, "DETACHED_PROCESS", 0)
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                                    start_new_session=True, creationflags=flags, close_fds=True,
                                    cwd=str(self.sock.parent))
        finally:
            os.close(fd)
        self._procs.append(proc)
        return proc

    def reap(self) -> None:
        """Collect services this process started that have exited (no zombies while the server runs)."""
        self._procs = [p for p in self._procs if p.poll() is None]

    def log_tail(self, chars: int = 600) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:].strip()
        except OSError:
            return "(no log)"
