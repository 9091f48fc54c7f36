"""LSP over TCP: loopback unless a token guards it, and one server of its own per connection.

- `--tcp [HOST:]PORT` (IPv6 hosts in brackets: `[::1]:7777`, `[::]:7777`). HOST defaults to 127.0.0.1.
- A host that is not loopback (`0.0.0.0`, `::`, a LAN address, a name that resolves to one) refuses to start
  unless `--token-env NAME` names an environment variable holding a token of at least `TOKEN_MIN` characters
  (an environment variable, not a flag: command lines are visible to every user of the machine). With a token,
  loopback included, each connection's first message must be `initialize` with `initializationOptions.token`
  set to it; anything else is answered once with Invalid Request and the connection is closed. The token is
  removed from the options before the settings see them. It is compared in constant time and never logged.
- Each connection gets its own server from `make_server` (documents, settings, engine thread, and its own copy of
  the model, loaded on its `initialized`), writing only to its own socket; `exit` or a closed socket ends that
  connection only.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any

from dg_lsp.wire.transport import CHUNK, serve_messages

log = logging.getLogger(__name__)

TOKEN_MIN = 16


def parse_host_port(value: str) -> tuple[str, int]:
    """`[HOST:]PORT` with IPv6 hosts in brackets -> (host, port); an argparse type."""
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected [IPV6]:PORT, got {value!r}")
    else:
        host, _, port = value.rpartition(":")
        if ":" in host:
            raise argparse.ArgumentTypeError(f"an IPv6 host goes in brackets: [{host}]:{port}")
    try:
        n = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected [HOST:]PORT, got {value!r}") from None
    if not 0 < n < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {n}")
    return host or "127.0.0.1", n


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def required_token(host: str, token_env: str | None, environ: Mapping[str, str]) -> str | None:
    """The token clients must send (None: none needed). ValueError, with the message to print, when the server
    must not start."""
    if token_env is None:
        if is_loopback(host):
            return None
        raise ValueError(
            f"--tcp {host}: not a loopback address, so anyone who can reach it could use this server and read what "
            f"it is sent. Put a token of at least {TOKEN_MIN} characters in an environment variable and pass "
            "--token-env NAME (clients then send it as initializationOptions.token), or listen on 127.0.0.1 or "
            "[::1].")
    token = environ.get(token_env, "")
    if len(token) < TOKEN_MIN:
        state = "is not set" if token_env not in environ else f"holds fewer than {TOKEN_MIN} characters"
        raise ValueError(f"--token-env {token_env}: the environment variable {state}; it must hold the token "
                         f"clients send (at least {TOKEN_MIN} characters).")
    return token


class TokenGate:
    """Accepts a connection's first message when it is `initialize` carrying the token (which it removes)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def __call__(self, message: dict[str, Any]) -> str | None:
        if message.get("method") != "initialize" or "id" not in message:
            return "unauthorized: the first message must be initialize with initializationOptions.token"
        params = message.get("params")
        options = params.get("initializationOptions") if isinstance(params, dict) else None
        sent = options.pop("token", None) if isinstance(options, dict) else None
        if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), self._token):
            return "unauthorized: initializationOptions.token is missing or wrong"
        return None


async def serve_tcp(make_server: Callable[[], Any], host: str, port: int, token: str | None) -> None:
    """Listen on host:port until cancelled; each connection is served by a new server from `make_server`."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        server = make_server()  # dg_lsp.server.Server
        server.client.set_writer(writer)
        log.info("connection from %s", peer)
        try:
            code = await serve_messages(lambda: reader.read(CHUNK), server.dispatcher,
                                        gate=TokenGate(token) if token is not None else None)
            log.info("connection from %s ended (exit code %d)", peer, code)
        except ConnectionError as e:
            log.info("connection from %s lost: %s", peer, e)
        finally:
            server.shutdown()
            writer.close()

    listener = await asyncio.start_server(connection, host, port)
    where = ", ".join(str(s.getsockname()[:2]) for s in listener.sockets)
    if is_loopback(host):
        log.info("serving LSP on %s", where)
    else:
        log.warning("serving LSP on %s (not loopback): every connection must send the token", where)
    async with listener:
        await listener.serve_forever()
