"""The VS Code extension's settings (editors/vscode/package.json, contributes.configuration) against the server's
settings table (dg_lsp/config.py): every server key is settable from VS Code under `dg.<key>`, with the JSON type
and the default the server has, nothing else besides the client's own `dg.server.*`; and the extension's README
names every one. A key added to the server without its VS Code setting (as openaiDiffusion, indexMaxFiles and
indexMaxFileBytes once were) fails here."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path

from dg_lsp.config import KEYS, Settings

EXT = Path(__file__).resolve().parents[2] / "editors" / "vscode"
CLIENT_KEYS = {"dg.server.command", "dg.server.pythonPath", "dg.server.args"}
JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", tuple: "array",
              type(None): "null"}


def contributed() -> dict[str, dict]:
    return json.loads((EXT / "package.json").read_text())["contributes"]["configuration"]["properties"]


def json_types(annotation: object) -> set[str]:
    """`int | None` -> {"integer", "null"}; `tuple[str, ...] | None` -> {"array", "null"}."""
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return {JSON_TYPES[typing.get_origin(a) or a] for a in args}


def test_every_server_setting_is_a_vscode_setting_and_nothing_else_is():
    server = {f"dg.{key}" for key in KEYS}
    assert set(contributed()) - CLIENT_KEYS == server


def test_each_vscode_setting_has_the_servers_type_and_default():
    hints = typing.get_type_hints(Settings)
    defaults = {f.name: f.default for f in dataclasses.fields(Settings)}
    props = contributed()
    for key, name in KEYS.items():
        prop = props[f"dg.{key}"]
        declared = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
        assert set(declared) == json_types(hints[name]), key
        default = list(defaults[name]) if isinstance(defaults[name], tuple) else defaults[name]
        assert prop["default"] == default, key


def test_the_readme_names_every_setting():
    readme = (EXT / "README.md").read_text()
    named = set(re.findall(r"`(dg\.[A-Za-z.]+)`", readme))
    assert set(contributed()) <= named, sorted(set(contributed()) - named)
