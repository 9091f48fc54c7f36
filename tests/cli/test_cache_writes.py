"""A full disk while caching: the error names the path and nothing half-written is left (it once left a 0-byte
config.json and named no path). The service backend's checkpoint-file cache, and the files commands replace
(`write_atomic`, e.g. `dg-lsp calibrate --write`'s infill.json)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest

from dg_lsp.backends import service
from engine.tools.command import write_atomic

FILES = {"tokenizer.json": b'{"model": {}}', "config.json": b'{"architectures": ["X"]}'}


def full_disk(name: str):
    """Path.write_bytes that fails as a full disk does for `name`, after creating the file (as open() would)."""
    real = Path.write_bytes

    def write_bytes(self: Path, data: bytes) -> int:
        if self.name == name:
            self.touch()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    return write_bytes


def fake_service() -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=FILES[request.url.path.rsplit("/", 1)[1]])

    return httpx.Client(base_url="http://dg-engine", transport=httpx.MockTransport(answer))


def test_the_checkpoint_cache_names_its_path_and_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(Path, "write_bytes", full_disk("config.json"))
    manifest = {"id": "abc123", "files": {n: {"sha256": hashlib.sha256(b).hexdigest()} for n, b in FILES.items()}}
    cache = tmp_path / "dg-lsp" / "checkpoints"
    with fake_service() as http, pytest.raises(OSError) as caught:
        service._fetch_files(http, manifest)
    assert caught.value.errno == errno.ENOSPC
    assert str(cache / "abc123") in str(caught.value) and "No space left on device" in str(caught.value)
    assert list(cache.iterdir()) == []  # neither the cache entry nor its half-written temporary folder
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with fake_service() as http:  # with room again, the same call caches every file whole
        target = service._fetch_files(http, manifest)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == FILES


def test_a_replaced_file_is_whole_or_untouched(tmp_path, monkeypatch):
    infill = tmp_path / "infill.json"
    infill.write_text('{"canvas_lengths": [16]}\n')

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match=f"could not write {infill}: No space left on device"):
        write_atomic(infill, json.dumps({"canvas_lengths": [16], "min_confidence": 0.4}))
    assert infill.read_text() == '{"canvas_lengths": [16]}\n' and [p.name for p in tmp_path.iterdir()] == [infill.name]
    monkeypatch.undo()
    write_atomic(infill, '{"min_confidence": 0.4}\n')
    assert json.loads(infill.read_text()) == {"min_confidence": 0.4}
