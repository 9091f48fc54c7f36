"""The type check `make typecheck` runs holds the handlers to the session services their family declares
(dg_lsp.handlers.services): a handler that reads a member its family does not declare fails it, a session that lacks
a declared member fails it where it is registered, and the real session passes for every family.

mypy starts from a copy of the cache `make typecheck` writes (the Makefile's MYPY_CACHE_DIR, shared by clones), when
there is one: it checks each cached file against its source's hash, so only the files here and the project files that
changed are checked again. A cold cache spends ~50 CPU-s on torch's stubs (the test took 56 s on its own in CI; warm:
a few seconds). The shared cache itself is never written by the test."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]


def shared_cache() -> Path:
    """The folder `make typecheck` passes as MYPY_CACHE_DIR (same precedence as the Makefile)."""
    if os.environ.get("MYPY_CACHE_DIR"):
        return Path(os.environ["MYPY_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dg-lsp" / "mypy"


# Read when pytest imports this module, before any test runs: session fixtures elsewhere (tests/conformance's
# private_cache) point XDG_CACHE_HOME at a temporary folder for the rest of their worker's session, and a test here
# that read it then found no cache (91 s in a full run instead of 5).
SHARED_CACHE = shared_cache()

UNDECLARED = '''
from dg_lsp.handlers.services import InlineSession


def clears_caches(ls: InlineSession) -> None:
    ls.caches.clear()  # the fill caches are not an inline handler's to touch
'''

LACKING = '''
from dg_lsp.wire.dispatch import Dispatcher
from dg_lsp.handlers import inline


class OnlyDocuments:
    encoding = "utf-16"


def wire(dispatch: Dispatcher, session: OnlyDocuments) -> None:
    inline.register(dispatch, session)
'''

REAL = '''
from dg_lsp.wire.dispatch import Dispatcher
from dg_lsp.handlers import commands, documents, inline, lifecycle, nextedit
from dg_lsp.session import DgServer


def wire(dispatch: Dispatcher, session: DgServer) -> None:
    lifecycle.register(dispatch, session)
    documents.register(dispatch, session)
    inline.register(dispatch, session)
    commands.register(dispatch, session)
    nextedit.register(dispatch, session)
'''


def test_handlers_are_checked_against_their_declared_services(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    files = {}
    for name, text in (("undeclared", UNDECLARED), ("lacking", LACKING), ("real", REAL)):
        files[name] = tmp_path / f"{name}.py"
        files[name].write_text(textwrap.dedent(text))
    cache = tmp_path / "cache"
    if SHARED_CACHE.is_dir():
        shutil.copytree(SHARED_CACHE, cache)
    out, err, code = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
                              *map(str, files.values())])
    out += err
    assert code == 1, out
    assert '"InlineSession" has no attribute "caches"' in out
    assert 'Argument 2 to "register" has incompatible type "OnlyDocuments"; expected "InlineSession"' in out
    assert "real.py" not in out, out  # DgServer provides every family's services
