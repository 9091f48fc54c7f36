"""The type check `make typecheck` runs holds the handlers to the session services their family declares
(dg_lsp.handlers.services): a handler that reads a member its family does not declare fails it, a session that lacks
a declared member fails it where it is registered, and the real session passes for every family."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]

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
    out, err, code = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                              *map(str, files.values())])
    out += err
    assert code == 1, out
    assert '"InlineSession" has no attribute "caches"' in out
    assert 'Argument 2 to "register" has incompatible type "OnlyDocuments"; expected "InlineSession"' in out
    assert "real.py" not in out, out  # DgServer provides every family's services
