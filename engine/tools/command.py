"""What every command line shares: a mistake is answered in one line, the traceback goes to a log file.

- `Parser`: argparse whose errors are one line on stderr (`prog: error: ... (prog --help)`), exit 2.
- `Refused`: an expected failure (a bad model folder, a device this machine lacks, a busy port); its message is the
  line the user reads. `run` prints it as `prog: message` and exits with its code.
- `run(prog, body)`: calls `body()`; an unexpected exception is one line naming the log file, where its traceback
  goes. Ctrl-C ends with 130 and no traceback.
- `checked_model`: `--model` and `--device` checked before anything loads; `write_atomic`: a file whole or not at all.
- `setup_logging`: log records at the chosen level on stderr, one line each (a traceback only as "(traceback in
  LOG)"), and in full in the log file (`--log-file`, default `log_path(command)`), which is created only when
  something is written to it.

Exit codes (docs/PROTOCOL.md, "Starting (the command line)"): 0 done; 1 it ran and failed (the model would not
load, a check fill failed); 2 the command line was refused (a bad flag, a model folder that is not one, a device
this machine lacks, an address that cannot be bound); 3 another engine service already serves that socket; 130
interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

EXIT_FAILED, EXIT_USAGE, EXIT_RUNNING, EXIT_INTERRUPTED = 1, 2, 3, 130
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Refused(Exception):
    """An expected failure: `str(self)` is the one line the user reads; `code` the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (argparse's own prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def log_path(command: str) -> Path:
    """Where `command`'s log goes by default: $XDG_CACHE_HOME/dg-lsp/logs/COMMAND.log (else ~/.cache/...)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dg-lsp" / "logs" / f"{command}.log"


class _OneLine(logging.Formatter):
    """A record on one line; its traceback is left to the log file, named instead."""

    def __init__(self, log_file: Path | None) -> None:
        super().__init__(LOG_FORMAT)
        self.log_file = log_file

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            line = super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved
        exc = saved[0][1] if saved[0] else None
        if exc is not None:
            line += f": {type(exc).__name__}: {str(exc).partition(chr(10))[0]}"
            if self.log_file is not None:
                line += f" (traceback in {self.log_file})"
        return line.replace("\n", " ")


class _LazyFile(logging.FileHandler):
    """A log file made (with its folder) only when a record is written; never a failure of its own."""

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(OSError):
            Path(self.baseFilename).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 -- logging's name
        pass  # a log file that cannot be written must not turn one error into two


def setup_logging(level: str, log_file: Path | None) -> None:
    """stderr at `level`, one line per record; with `log_file`, the same records in full (tracebacks) there."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(_OneLine(log_file))
    err.setLevel(level)
    root.addHandler(err)
    if log_file is not None:
        f = _LazyFile(log_file, delay=True, encoding="utf-8")
        f.setFormatter(logging.Formatter(LOG_FORMAT))
        f.setLevel(level)
        root.addHandler(f)
    root.setLevel(level)


def checked_model(model: str | None, device: str) -> Path:
    """`--model` and `--device` checked before anything is loaded: the checkpoint folder (or .gguf file) is one, its
    config reads (by the family that reads it: engine.families.registry, as Engine.from_pretrained dispatches), its
    weight files' headers read, and the device exists. Raises Refused (exit 2)."""
    from engine.engine import default_model_path, resolve_device
    from engine.families.contract import MaskFamily
    from engine.families.gguf import summary as gguf_summary
    from engine.families.registry import family_of
    from engine.loader import checkpoint_files, load_checkpoint_config

    path = Path(model).expanduser() if model else default_model_path()
    if not path.is_dir() and not (path.is_file() and path.suffix == ".gguf"):
        raise Refused(f"--model {path}: no such checkpoint (a folder holding config.json and model.safetensors, or "
                      "a .gguf file)")
    try:
        family = family_of(path)  # engine.families.registry: what Engine.from_pretrained dispatches on
        if isinstance(family, MaskFamily):  # a mask-diffusion family: its own config reading (or GGUF header)
            if path.is_dir() and (path / "config.json").is_file():
                family.read_config(path)
            else:
                gguf_summary(path)
        else:
            load_checkpoint_config(path)
        if path.is_dir():
            from safetensors import safe_open

            for file in checkpoint_files(path):
                with safe_open(str(file), framework="pt"):  # the header only: a damaged file is refused here
                    pass
    except Exception as exc:  # noqa: BLE001 -- whatever the reader says is the reason, in one line
        raise Refused(f"--model {path} is not a checkpoint this engine reads: {type(exc).__name__}: {exc}") from exc
    try:
        resolve_device(device)
    except (ValueError, RuntimeError) as exc:
        raise Refused(f"--device {device}: {exc} (use --device cpu, or auto)") from exc
    return path


def write_atomic(path: Path, data: str | bytes) -> None:
    """`path` holds `data` whole, or is left as it was: written to a temporary file beside it, then renamed over it
    (os.replace). A failure (a full disk) raises OSError naming `path` and leaves no partial file behind."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OSError(exc.errno, f"could not write {path}: {exc.strerror or exc} (it was left as it was)") from exc


def write_traceback(log_file: Path | None, prog: str) -> bool:
    """Append the exception being handled to `log_file`; False when there is none or it cannot be written."""
    if log_file is None:
        return False
    try:
        log_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(log_file, "a", encoding="utf-8") as f:
            f.write(f"--- {prog} (pid {os.getpid()}) ---\n{traceback.format_exc()}")
    except OSError:
        return False
    return True


def run(prog: str, body: Callable[[], int], log_file: Path | None = None) -> int:
    """`body()`'s exit code; a Refused or any other exception as one line on stderr (the traceback in `log_file`)."""
    try:
        return body()
    except Refused as exc:
        if exc.__cause__ is not None:
            write_traceback(log_file, prog)
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 -- one line here, the traceback in the log
        where = f" (traceback in {log_file})" if write_traceback(log_file, prog) else ""
        first = str(exc).split("\n")[0]
        print(f"{prog}: {type(exc).__name__}: {first}{where}", file=sys.stderr)
        return EXIT_FAILED
