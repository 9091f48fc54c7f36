"""The training corpus: local Python sources, a fixed held-out rule, and a manifest that makes it reproducible."""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Directories of the standard library that are not ordinary code (test data, vendored grammars, site-packages).
_SKIP_PARTS = {"site-packages", "test", "tests", "idle_test", "lib2to3", "__pycache__", "ensurepip", "turtledemo"}
MAX_FILE_BYTES = 400_000
HELD_OUT_MODULUS = 20  # 1 file in 20 (by hash of its relative path) is never seen in training


@dataclass(frozen=True)
class SourceFile:
    """One corpus file: path relative to its root, size in bytes and sha256 of its bytes."""

    root: str
    rel: str
    size: int
    sha256: str

    @property
    def path(self) -> Path:
        return Path(self.root) / self.rel

    @property
    def held_out(self) -> bool:
        return is_held_out(self.rel)

    def read(self) -> str:
        return self.path.read_text(encoding="utf-8")


def is_held_out(rel: str) -> bool:
    """Fixed rule: the file is held out when sha1(relative path) mod 20 == 0 (independent of machine and order)."""
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % HELD_OUT_MODULUS == 0


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def scan(root: Path | None = None) -> list[SourceFile]:
    """All readable UTF-8 `.py` files under `root` (the standard library by default), sorted by relative path."""
    root = Path(root) if root is not None else stdlib_root()
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if _SKIP_PARTS.intersection(rel.split("/")[:-1]) or not path.is_file():
            continue
        data = path.read_bytes()
        if not data.strip() or len(data) > MAX_FILE_BYTES:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        files.append(SourceFile(str(root), rel, len(data), hashlib.sha256(data).hexdigest()))
    return files


def split(files: list[SourceFile]) -> tuple[list[SourceFile], list[SourceFile]]:
    """(train, held_out) by the fixed hash rule."""
    return [f for f in files if not f.held_out], [f for f in files if f.held_out]


def write_manifest(files: list[SourceFile], path: Path) -> None:
    body = {
        "held_out_rule": f"sha1(relative path) % {HELD_OUT_MODULUS} == 0",
        "files": [
            {"root": f.root, "path": f.rel, "size": f.size, "sha256": f.sha256, "held_out": f.held_out} for f in files
        ],
    }
    Path(path).write_text(json.dumps(body, indent=1) + "\n")


def read_manifest(path: Path, verify: bool = False) -> list[SourceFile]:
    """Files of a manifest; with `verify`, drop (and count) files whose bytes changed since it was written."""
    body = json.loads(Path(path).read_text())
    files = [SourceFile(f["root"], f["path"], f["size"], f["sha256"]) for f in body["files"]]
    if verify:
        files = [f for f in files if f.path.is_file() and hashlib.sha256(f.path.read_bytes()).hexdigest() == f.sha256]
    return files
