"""Context from other files end to end: a server whose workspace folder holds 2,000 files answers requests while it
indexes them, and a hole that calls another module's function gets that definition (dg/status `crossFile`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest_asyncio
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig
from server_harness import CAPABILITIES, make_client, server_command, server_env, stop_server, wait_for

from dg_lsp.devtools.client import inline_params, open_doc

MONEY = 'def add_tax(amount, rate):\n    """The amount with tax."""\n    return amount * (1 + rate)\n'
APP = "from lib.money import add_tax\n\n\ndef total(x):\n    return add_tax(\n"


def workspace(root: Path, n: int = 2000) -> None:
    (root / "lib").mkdir()
    (root / "lib/money.py").write_text(MONEY)
    (root / "app.py").write_text(APP)
    pkg = root / "pkg"
    pkg.mkdir()
    body = "".join(f"def helper_{j}(a, b):\n    '''Helper {j}.'''\n    return a * {j} + b\n\n" for j in range(120))
    for i in range(n):
        (pkg / f"mod_{i:04d}.py").write_text(f"import os\n\nclass Thing{i}:\n    pass\n\n" + body)


@pytest_asyncio.fixture
async def started(tiny_ckpt, tmp_path):
    workspace(tmp_path)
    config = ClientServerConfig(server_command=server_command(tiny_ckpt), client_factory=make_client,
                                server_env=server_env())
    client = await config.start()
    folder = T.WorkspaceFolder(uri=tmp_path.as_uri(), name="ws")
    client.init_result = await client.initialize_session(T.InitializeParams(
        capabilities=CAPABILITIES, workspace_folders=[folder], initialization_options={"steps": 2}))
    yield client, tmp_path
    await stop_server(client)


def fills(client) -> list[dict]:
    return [s["request"] for s in client.statuses if "request" in s and "crossFile" in s["request"]]


async def test_requests_answered_while_indexing_and_context_found(started):
    client, root = started
    uri = (root / "app.py").as_uri()
    open_doc(client, uri, APP)
    await wait_for(lambda: any(s["state"] in ("ready", "error") for s in client.statuses), timeout=60)
    line, char = 4, len("    return add_tax(")
    answered = 0
    for _ in range(3):
        await client.text_document_inline_completion_async(inline_params(uri, line, char))
        answered += 1
        actions = await client.text_document_code_action_async(T.CodeActionParams(
            text_document=T.TextDocumentIdentifier(uri=uri), range=T.Range(T.Position(line=line, character=char),
                                                                             T.Position(line=line, character=char)),
            context=T.CodeActionContext(diagnostics=[])))
        assert actions is not None
    assert answered == 3
    await wait_for(lambda: len(fills(client)) >= 1, timeout=30)
    first = fills(client)[0]["crossFile"]
    # the first answers came while the 2,000 files were still being indexed (the loop was never blocked)
    assert first["index"]["state"] == "building" and first["index"]["files"] < 2002
    assert "lib/money.py" in first["files"] and first["tokens"] > 0
    # which definitions went in (issue 33 case 4)
    assert {(i["path"], i["line"], i["name"]) for i in first["items"]} >= {("lib/money.py", 0, "add_tax")}
    assert {i["kind"] for i in first["items"]} <= {"whole", "signature", "window"}


async def test_watched_files_registration_and_a_created_file(tiny_ckpt, tmp_path):
    (tmp_path / "lib").mkdir()
    app = "from lib.extra import shiny\n\n\ndef total(x):\n    return shiny(\n"
    (tmp_path / "app.py").write_text(app)
    config = ClientServerConfig(server_command=server_command(tiny_ckpt), client_factory=make_client,
                                server_env=server_env())
    client = await config.start()
    registrations: list = []

    @client.feature(T.CLIENT_REGISTER_CAPABILITY)
    def register(params: T.RegistrationParams) -> None:
        registrations.extend(params.registrations)

    caps = attrs.evolve(CAPABILITIES, workspace=attrs.evolve(
        CAPABILITIES.workspace, did_change_watched_files=T.DidChangeWatchedFilesClientCapabilities(
            dynamic_registration=True)))
    await client.initialize_session(T.InitializeParams(capabilities=caps, root_uri=tmp_path.as_uri(),
                                                       initialization_options={"steps": 2}))
    try:
        await wait_for(lambda: registrations, timeout=30)
        assert registrations[0].method == T.WORKSPACE_DID_CHANGE_WATCHED_FILES
        assert "py" in registrations[0].register_options["watchers"][0]["globPattern"]
        uri = (tmp_path / "app.py").as_uri()
        open_doc(client, uri, app)
        await wait_for(lambda: any(s["state"] in ("ready", "error") for s in client.statuses), timeout=60)
        (tmp_path / "lib/extra.py").write_text('def shiny(value):\n    """Polish a value."""\n')
        client.workspace_did_change_watched_files(T.DidChangeWatchedFilesParams(
            changes=[T.FileEvent(uri=(tmp_path / "lib/extra.py").as_uri(), type=T.FileChangeType.Created)]))

        async def included() -> bool:
            await client.text_document_inline_completion_async(inline_params(uri, 4, len("    return shiny(")))
            return any("lib/extra.py" in f["crossFile"]["files"] for f in fills(client))

        for _ in range(100):
            if await included():
                break
            await asyncio.sleep(0.1)
        assert any("lib/extra.py" in f["crossFile"]["files"] for f in fills(client))
    finally:
        await stop_server(client)
