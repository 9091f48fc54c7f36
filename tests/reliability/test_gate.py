"""The confidence gate through the real server (issue 25): a fill below minConfidence shows no ghost text, and a
command below it edits nothing, says why with the confidence, and offers to apply it anyway (a code action, or the
command again with force: true). The tiny random checkpoint's fills have a low confidence; a gate of 1.0 is above
any of them, a gate of 0 lets everything through."""

from __future__ import annotations

from .conftest import pos

DOC = "import os\n\ndef add(a, b):\n    return \n\nprint(add(1, 2))\n"
URI = "file:///gate.txt"


def status_of(srv, request_id: int) -> dict:
    return srv.until(lambda m: m.get("method") == "dg/status" and (m["params"].get("request") or {}).get("id")
                     == str(request_id))["params"]["request"]


def test_below_the_gate_no_inline_item_and_the_status_says_why(start_server):
    srv = start_server({"steps": 4, "debounceMs": 0, "minConfidence": 1.0})
    srv.open(URI, DOC)
    msg_id, request = srv.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": pos(3, 11), "context": {"triggerKind": 1}})
    srv.send(request)
    assert srv.response(msg_id)["result"] is None
    status = status_of(srv, msg_id)
    assert status["reason"] == "low confidence" and 0.0 <= status["confidence"] < 1.0, status
    assert status["minConfidence"] == 1.0


def test_with_no_gate_the_same_request_shows_the_fill_and_its_confidence(start_server):
    srv = start_server({"steps": 4, "debounceMs": 0, "minConfidence": 0})
    srv.open(URI, DOC)
    msg_id, request = srv.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": pos(3, 11), "context": {"triggerKind": 1}})
    srv.send(request)
    assert srv.response(msg_id)["result"]["items"]
    status = status_of(srv, msg_id)
    assert status["reason"] is None and 0.0 <= status["confidence"] <= 1.0


def test_a_withheld_command_edits_nothing_says_why_and_can_be_applied_anyway(start_server):
    srv = start_server({"steps": 4, "debounceMs": 0, "minConfidence": 1.0})
    srv.open(URI, DOC)
    fill = {"textDocument": {"uri": URI, "version": 1}, "position": pos(3, 11)}
    result = srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [fill]})["result"]
    assert result["applied"] is False and result["reason"] == "low confidence", result
    assert 0.0 <= result["confidence"] < 1.0 and result["minConfidence"] == 1.0
    assert result["version"] == 1 and isinstance(result["documentOpen"], int)  # what a resend pins itself to
    assert srv.applied == []
    shown = srv.until(lambda m: m.get("method") == "window/showMessage" and "withheld" in m["params"]["message"])
    assert "Fill hole anyway" in shown["params"]["message"]
    # the code action at the same place runs the same command with force: true
    actions = srv.call("textDocument/codeAction", {"textDocument": {"uri": URI}, "range": {
        "start": pos(3, 11), "end": pos(3, 11)}, "context": {"diagnostics": []}})["result"]
    anyway = [a for a in actions if "anyway" in a["title"]]
    assert len(anyway) == 1 and f"{result['confidence']:.2f}" in anyway[0]["title"], actions
    command = anyway[0]["command"] if isinstance(anyway[0]["command"], dict) else anyway[0]
    assert command["arguments"][0]["force"] is True
    forced = srv.call("workspace/executeCommand", {"command": command["command"],
                                                   "arguments": command["arguments"]})["result"]
    assert forced["applied"] is True, forced
    (edit,) = srv.applied
    (doc_edit,) = edit["edit"]["documentChanges"]
    assert doc_edit["textDocument"]["version"] == 1 and doc_edit["edits"][0]["range"]["start"] == pos(3, 11)


def test_no_anyway_action_elsewhere_or_after_an_edit(start_server):
    srv = start_server({"steps": 4, "debounceMs": 0, "minConfidence": 1.0})
    srv.open(URI, DOC)
    fill = {"textDocument": {"uri": URI}, "position": pos(3, 11)}
    assert srv.call("workspace/executeCommand", {"command": "dg.fillHole", "arguments": [fill]})["result"][
        "reason"] == "low confidence"

    def titles(line: int) -> list[str]:
        return [a["title"] for a in srv.call("textDocument/codeAction", {"textDocument": {"uri": URI}, "range": {
            "start": pos(line, 0), "end": pos(line, 0)}, "context": {"diagnostics": []}})["result"]]

    assert not any("anyway" in t for t in titles(0))  # another place
    srv.send(srv.change(URI, (0, 0), (0, 0), "#"))
    assert not any("anyway" in t for t in titles(3))  # the document changed since


def test_a_bad_gate_setting_is_reported_and_takes_its_default(start_server):
    srv = start_server({"minConfidence": 2})  # the warning comes before the model is ready
    warnings = [m["params"]["message"] for m in srv.seen if m.get("method") == "window/showMessage"]
    assert any("minConfidence" in w and "0..1" in w for w in warnings), warnings
