"""The `initialize` answer: the server's capabilities from the methods and commands registered with the dispatcher
(dg_lsp.wire.dispatch), and the position encoding agreed with the client.

The same answer pygls' capability builder gave for these features (tests/lsp/test_dispatch.py holds it): document
sync incremental with open/close and save, each provider's options as registered, the commands, workspace folders
(announced and their changes accepted), and `experimental` (dgNextEdit). The encoding is the client's first
preference that the server supports (utf-8, utf-16, utf-32), else utf-16, LSP's default.
"""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types as T

log = logging.getLogger(__name__)

ENCODINGS = (T.PositionEncodingKind.Utf8, T.PositionEncodingKind.Utf16, T.PositionEncodingKind.Utf32)
# a registered method -> the ServerCapabilities field its options go in
PROVIDERS = {
    T.TEXT_DOCUMENT_INLINE_COMPLETION: "inline_completion_provider",
    T.TEXT_DOCUMENT_COMPLETION: "completion_provider",
    T.TEXT_DOCUMENT_CODE_ACTION: "code_action_provider",
}


def choose_encoding(client: T.ClientCapabilities) -> str:
    """LSP's position encoding negotiation: the client's first supported preference, else utf-16."""
    offered = client.general.position_encodings if client.general is not None else None
    for encoding in offered or ():
        if encoding in ENCODINGS:
            return str(getattr(encoding, "value", encoding))
    if offered:
        log.warning("unknown position encodings %s: using utf-16", list(offered))
    return T.PositionEncodingKind.Utf16.value


def server_capabilities(client: T.ClientCapabilities, methods: set[str], options: dict[str, Any],
                        commands: list[str], encoding: str, experimental: dict[str, Any]) -> T.ServerCapabilities:
    """What the server offers: `methods` it handles, their `options` (a provider's), `commands` in the order
    registered, `encoding` (from `choose_encoding`), `experimental` capabilities."""
    sync = client.text_document.synchronization if client.text_document is not None else None
    will_save = sync.will_save if sync is not None else None
    will_save_wait_until = sync.will_save_wait_until if sync is not None else None
    caps = T.ServerCapabilities(
        position_encoding=encoding,
        text_document_sync=T.TextDocumentSyncOptions(
            open_close=T.TEXT_DOCUMENT_DID_OPEN in methods or T.TEXT_DOCUMENT_DID_CLOSE in methods,
            change=T.TextDocumentSyncKind.Incremental,
            # what the client offers and the server handles (False where the client offers and it does not)
            will_save=will_save and T.TEXT_DOCUMENT_WILL_SAVE in methods,
            will_save_wait_until=will_save_wait_until and T.TEXT_DOCUMENT_WILL_SAVE_WAIT_UNTIL in methods,
            save=T.TEXT_DOCUMENT_DID_SAVE in methods or None),
        execute_command_provider=T.ExecuteCommandOptions(commands=commands) if commands else None,
        workspace=T.WorkspaceOptions(
            workspace_folders=T.WorkspaceFoldersServerCapabilities(supported=True, change_notifications=True)
            if T.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS in methods else None,
            file_operations=T.FileOperationOptions()),
        experimental=experimental or None,
    )
    for method, field in PROVIDERS.items():
        if method in methods:
            setattr(caps, field, options.get(method) or True)
    return caps
