"""Next edits over the real server (docs/PROTOCOL.md "Next edits"): on a scripted backend whose "model" makes known
replacements in the window (so the proposal is known), and on the shipped model end to end.

Every answer is {"edits": [...]}: edits against the request's version, echoed; nothing for a document that changed
or was reopened before the answer, nothing for a proposal that is unchanged, undoes the user's last edit, breaks the
syntax or is below the confidence gate; a didChange cancels the running proposal."""

from __future__ import annotations

import pytest

from .conftest import apply, ask

URI = "file:///work/shapes.py"
BEFORE = "def area(width, height):\n    return width * height\n\n\nprint(area(2, 3))\n"
RENAMED = BEFORE.replace("(width,", "(wide,")  # the user's edit: line 0, characters 9..14


def rename(srv) -> dict:
    """Open BEFORE and rename the parameter as a user would: select `width`, type `wide` (a didChange, not sent)."""
    srv.open(URI, BEFORE, "python")
    return srv.change(URI, (0, 9), (0, 14), "wide")


def counts_reach(srv, expected: dict) -> dict:
    """The next-edit counts of the first dg/status that holds `expected` (counts only grow): a request's dg/status
    follows its answer on the wire, so it is waited for, not read from what came so far."""
    def holds(m: dict) -> bool:
        counts = m.get("params", {}).get("nextEdit") if m.get("method") == "dg/status" else None
        return counts is not None and all(counts.get(k) == v for k, v in expected.items())
    return srv.first(holds)["params"]["nextEdit"]


def test_the_capability_the_command_and_a_proposal_accepted(servers):
    srv = servers.scripted([("width", "wide")], {"minConfidence": 0.5})
    caps = srv.init_result["result"]["capabilities"]
    assert caps["experimental"]["dgNextEdit"] is True
    assert "dg.acceptNextEdit" in caps["executeCommandProvider"]["commands"]
    srv.send(rename(srv))
    msg_id, request = ask(srv, URI, 0, 13)
    srv.send(request)
    result = srv.response(msg_id)["result"]
    edits = result["edits"]
    assert edits and apply(RENAMED, edits) == RENAMED.replace("width", "wide")
    for e in edits:
        assert e["textDocument"] == {"uri": URI, "version": 2}
        assert e["command"]["command"] == "dg.acceptNextEdit"
    (arg,) = edits[0]["command"]["arguments"]
    assert arg["uri"] == URI and arg["version"] == 2 and isinstance(arg["documentOpen"], int) and arg["id"]
    srv.send(srv.notification("textDocument/didShowInlineEdit", {"item": edits[0]}))
    # the client applies all edits as one change, then runs the command
    srv.send(srv.change(URI, (1, 11), (1, 16), "wide"))
    accepted = srv.call("workspace/executeCommand", {"command": "dg.acceptNextEdit", "arguments": [arg]})
    assert accepted["result"] == {"accepted": True}
    again = srv.call("workspace/executeCommand", {"command": "dg.acceptNextEdit", "arguments": [arg]})
    assert again["result"]["accepted"] is False
    counts_reach(srv, {"requested": 1, "proposed": 1, "shown": 1, "accepted": 1})


@pytest.mark.parametrize("rules, options, confidence, reason", [
    ([], {}, 0.99, "unchanged"),
    ([("wide", "width")], {}, 0.99, "reverts last edit"),
    ([("height):", "height:")], {}, 0.99, "syntax error"),
    ([("width", "wide")], {"minConfidence": 0.9}, 0.5, "low confidence"),
], ids=["unchanged", "reversal", "syntax", "low-confidence"])
def test_a_proposal_the_filters_withhold_is_no_edits(servers, rules, options, confidence, reason):
    srv = servers.scripted(rules, options, confidence)
    srv.send(rename(srv))
    msg_id, request = ask(srv, URI, 0, 13)
    srv.send(request)
    assert srv.response(msg_id)["result"] == {"edits": []}
    status = srv.until(lambda m: m.get("method") == "dg/status" and "request" in m["params"])
    assert status["params"]["request"]["reason"] == reason
    counts_reach(srv, {"withheld": {reason: 1}})


def test_a_request_for_another_version_or_an_unknown_document_is_no_edits(servers):
    srv = servers.scripted([("width", "wide")])
    srv.send(rename(srv))
    for version in (1, 3):
        msg_id, request = ask(srv, URI, 0, 13, version=version)
        srv.send(request)
        assert srv.response(msg_id)["result"] == {"edits": []}
    msg_id, request = srv.request("textDocument/copilotInlineEdit", {"textDocument": {
        "uri": "file:///nowhere.py", "version": 1}, "position": {"line": 0, "character": 0}})
    srv.send(request)
    assert srv.response(msg_id)["result"] == {"edits": []}
    counts_reach(srv, {"withheld": {"document changed": 2, "unknown document": 1}})


def test_an_edit_between_the_request_and_its_answer_gets_no_edits(servers):
    srv = servers.scripted([("width", "wide")])
    srv.send(rename(srv))
    msg_id, request = ask(srv, URI, 0, 13)
    srv.send(request, srv.change(URI, (4, 0), (4, 0), "#"))  # in one write, as when the server is busy
    assert srv.response(msg_id)["result"] == {"edits": []}
    msg_id, request = ask(srv, URI, 0, 13)  # asked again for the new version: a proposal for it
    srv.send(request)
    (edit,) = srv.response(msg_id)["result"]["edits"]
    assert edit["textDocument"]["version"] == 3


@pytest.mark.parametrize("close", [True, False], ids=["close-open", "open-again"])
def test_a_reopen_between_the_request_and_its_answer_gets_no_edits(servers, close):
    """The new open starts at version 1 again with other text: a proposal computed for the old open at the same
    version number must not come back."""
    srv = servers.scripted([("width", "wide")])
    srv.open(URI, RENAMED, "python")
    msg_id, request = ask(srv, URI, 0, 13)
    srv.versions[URI] = 1
    opened = srv.notification("textDocument/didOpen", {"textDocument": {
        "uri": URI, "languageId": "python", "version": 1, "text": BEFORE}})
    closed = srv.notification("textDocument/didClose", {"textDocument": {"uri": URI}})
    srv.send(request, *([closed, opened] if close else [opened]))
    assert srv.response(msg_id)["result"] == {"edits": []}


def test_a_did_change_cancels_the_running_proposal(servers):
    srv = servers.scripted([("width", "wide")], delay=30.0)
    srv.send(rename(srv))
    msg_id, request = ask(srv, URI, 0, 13)
    srv.send(request)
    srv.until(lambda m: m.get("method") == "dg/status" and m["params"]["state"] == "busy")  # the engine runs it
    srv.send(srv.change(URI, (4, 0), (4, 0), "#"))
    assert srv.response(msg_id)["result"] == {"edits": []}
    status = srv.until(lambda m: m.get("method") == "dg/status" and m["params"].get("request", {}).get("id")
                       == str(msg_id))
    assert status["params"]["request"]["cancelled"] is True


def test_a_newer_request_supersedes_the_older_one(servers):
    srv = servers.scripted([("width", "wide")], delay=1.0)
    srv.send(rename(srv))
    first_id, first = ask(srv, URI, 0, 13)
    second_id, second = ask(srv, URI, 1, 4)
    srv.send(first, second)
    assert srv.response(first_id)["result"] == {"edits": []}
    assert srv.response(second_id)["result"]["edits"]


BAD = [
    None, [], {"textDocument": {"uri": URI, "version": 2}},  # no position
    {"textDocument": {"uri": 5, "version": 2}, "position": {"line": 0, "character": 0}},
    {"textDocument": {"uri": URI, "version": "2"}, "position": {"line": 0, "character": 0}},
    {"textDocument": {"uri": URI, "version": 2}, "position": {"line": -1, "character": 0}},
    {"textDocument": {"uri": URI, "version": 2}, "position": {"line": 1.5, "character": 0}},
    {"textDocument": {"uri": URI, "version": 2}, "position": {"line": 0, "character": 0},
     "context": {"triggerKind": 7}},
    {"textDocument": {"uri": URI, "version": 2}, "position": {"line": 99, "character": 0}},  # past the end
]


def test_invalid_params_are_invalid_params_and_the_server_keeps_answering(servers):
    srv = servers.scripted([("width", "wide")])
    srv.send(rename(srv))
    for params in BAD:
        answer = srv.call("textDocument/copilotInlineEdit", params)
        assert answer.get("error", {}).get("code") == -32602, (params, answer)
    for args in ([], [{"uri": URI}], [{"uri": URI, "version": "2"}], [{"uri": URI, "version": 2, "id": 3}]):
        answer = srv.call("workspace/executeCommand", {"command": "dg.acceptNextEdit", "arguments": args})
        assert answer.get("error", {}).get("code") == -32602, (args, answer)
    msg_id, request = ask(srv, URI, 0, 13)
    srv.send(request)
    assert srv.response(msg_id)["result"]["edits"]


def test_the_shipped_model_end_to_end(servers):
    """The shipped model was never trained for next edits: a proposal, if any, is edits against the request's
    version that leave the file parseable; else none, honestly."""
    srv = servers.raw(options={"minConfidence": 0})
    srv.send(rename(srv))
    for line, char in ((0, 13), (1, 11), (4, 6)):
        msg_id, request = ask(srv, URI, line, char)
        srv.send(request)
        result = srv.response(msg_id, timeout=120)["result"]
        assert set(result) == {"edits"}
        for e in result["edits"]:
            assert e["textDocument"] == {"uri": URI, "version": 2}
            assert e["command"]["arguments"][0]["version"] == 2
        if result["edits"]:
            compile(apply(RENAMED, result["edits"]), "shapes.py", "exec")  # never a syntax error added
    counts_reach(srv, {"requested": 3})


def test_edit_ranges_are_in_the_negotiated_encoding(servers):
    """utf-16 (the default): an astral character before the edit on its line counts two."""
    srv = servers.scripted([("width", "wide")])
    text = 'def area(width, height):  # 😀 width\n    return width * height\n'
    srv.open(URI, text, "python")
    srv.send(srv.change(URI, (0, 9), (0, 14), "wide"))
    msg_id, request = ask(srv, URI, 0, 13)
    srv.send(request)
    edits = srv.response(msg_id)["result"]["edits"]
    starts = sorted((e["range"]["start"]["line"], e["range"]["start"]["character"]) for e in edits)
    assert starts == [(0, 33), (1, 14)]  # "...# 😀 wid|th": 30 code points + 1 for the surrogate pair


def test_the_history_reaches_the_prompt_and_goes_with_a_close(servers):
    """A "model" that renames what the history's last edit renamed: the user's keystrokes (merged into one edit)
    reach it as comment diffs; after a close and a reopen the history is gone and nothing is proposed."""
    srv = servers.scripted([], from_history=True)
    srv.open(URI, BEFORE, "python")
    srv.send(srv.change(URI, (0, 9), (0, 14), ""))  # delete `width`, then type `wide` key by key
    for i, ch in enumerate("wide"):
        srv.send(srv.change(URI, (0, 9 + i), (0, 9 + i), ch))
    msg_id, request = ask(srv, URI, 1, 4)
    srv.send(request)
    edits = srv.response(msg_id)["result"]["edits"]
    assert apply(RENAMED, edits) == RENAMED.replace("width", "wide")
    srv.send(srv.notification("textDocument/didClose", {"textDocument": {"uri": URI}}))
    srv.open(URI, RENAMED, "python")  # version 1 again, the same text: no edits made in this open
    msg_id, request = ask(srv, URI, 1, 4)
    srv.send(request)
    assert srv.response(msg_id)["result"] == {"edits": []}


def test_the_setting_turns_next_edits_off_and_on(servers):
    srv = servers.scripted([("width", "wide")], {"nextEdit": False})
    srv.send(rename(srv))
    msg_id, request = ask(srv, URI, 0, 13)
    srv.send(request)
    assert srv.response(msg_id)["result"] == {"edits": []}
    counts_reach(srv, {"withheld": {"disabled": 1}})
    srv.send(srv.notification("workspace/didChangeConfiguration", {"settings": {"dg": {"nextEdit": True}}}))
    msg_id, request = ask(srv, URI, 0, 13)
    srv.send(request)
    assert srv.response(msg_id)["result"]["edits"]
