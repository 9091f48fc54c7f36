"""Auto-start of the engine service: one per user, machine and model, on a Unix socket only this user can reach.

The socket, its lock and the service's log live in `$XDG_RUNTIME_DIR/dg-lsp` (else `~/.cache/dg-lsp`), a
directory of mode 0700. Starting takes `start.lock` (flock), so windows opening together start one service: the
first spawns it, detached in its own session, and waits until it answers `/health` (it binds before it loads the
model); the others then find it answering. The service holds `<socket>.lock` for its whole life as well, so even a
start that bypassed `start.lock` cannot put a second service on the socket.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dg_lsp

IDLE_EXIT_S = 120  # the service exits this long after the last request (every connected client polls /health)
START_TIMEOUT_S = 60.0  # until the spawned service answers /health (imports and bind, not the model load)
RESPAWN_GAP_S = 5.0  # at least this long between two spawns by one client (a service that keeps dying)


def runtime_dir() -> Path:
    """The private directory for sockets and locks (created 0700; refused if another user owns it)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    d = Path(base) / "dg-lsp" if base and Path(base).is_dir() else Path.home() / ".cache" / "dg-lsp"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.stat()
    if st.st_uid != os.getuid():
        raise PermissionError(f"{d} belongs to another user; the engine service socket must be private")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    return d


def socket_path(model_path: str | None, device: str, dtype: str, prompt_format: str = "auto") -> Path:
    """The socket of the service for this model, device, dtype and prompt format (windows agreeing on them share
    it)."""
    model = str(Path(model_path).expanduser().resolve()) if model_path else "default"
    key = hashlib.sha256(f"{model}|{device}|{dtype}|{prompt_format}".encode()).hexdigest()[:12]
    return runtime_dir() / f"engine-{key}.sock"


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[None]:
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


class AutoStart:
    """Starts `python -m engine.service --uds SOCK ...` when nothing answers on SOCK."""

    def __init__(self, sock: Path, model_path: str | None, device: str, dtype: str,
                 prompt_format: str = "auto") -> None:
        self.sock = sock
        self.log_path = sock.with_suffix(".log")
        self.argv = [sys.executable, "-m", "engine.service", "--uds", str(sock), "--idle-exit", str(IDLE_EXIT_S),
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
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                                    start_new_session=True, close_fds=True, cwd=str(self.sock.parent))
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
