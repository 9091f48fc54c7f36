"""`dg/documentState`: what the server holds for a document, so a client or a test can check its copy.

Params `{"textDocument": {"uri": str}}`; result `{"version": int, "length": int, "sha256": str}`: the version of
the server's text, its length in Unicode code points, and the SHA-256 of its UTF-8 bytes (a lone surrogate, which
JSON can carry, is encoded as Python's "surrogatepass" does). An unknown document is Invalid Params.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams

DOCUMENT_STATE = "dg/documentState"


def _member(obj: Any, name: str) -> Any:
    """pygls hands a custom method's params over as nested namedtuples (plain dicts in unit tests)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def document_state(store: Any, params: Any) -> dict[str, Any]:
    uri = _member(_member(params, "textDocument"), "uri")
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f"{DOCUMENT_STATE}: textDocument.uri (a string) is required")
    held = store.get(uri)
    if held is None:
        raise JsonRpcInvalidParams(f"{DOCUMENT_STATE}: {uri} is not open")
    text = held.text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {"version": held.version, "length": len(text), "sha256": digest}


def register(server: Any) -> None:
    """Add `dg/documentState` to `server` (a DgServer: it reads `server.store`)."""

    @server.feature(DOCUMENT_STATE)
    def _document_state(ls: Any, params: Any) -> dict[str, Any]:
        return document_state(ls.store, params)
