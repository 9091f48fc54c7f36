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


def document_state(store: Any, params: Any) -> dict[str, Any]:
    doc = params.get("textDocument") if isinstance(params, dict) else None
    uri = doc.get("uri") if isinstance(doc, dict) else None
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f"{DOCUMENT_STATE}: textDocument.uri (a string) is required")
    held = store.get(uri)
    if held is None:
        raise JsonRpcInvalidParams(f"{DOCUMENT_STATE}: {uri} is not open")
    text = held.text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {"version": held.version, "length": len(text), "sha256": digest}


def register(dispatch: Any, ls: Any) -> None:
    """Add `dg/documentState` to `dispatch` (a dg_lsp.wire.dispatch.Dispatcher), reading the session `ls`'s store."""
    dispatch.request(DOCUMENT_STATE, lambda params: document_state(ls.store, params))
