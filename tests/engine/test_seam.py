"""The embedded engine satisfies the engine seam the server depends on."""

from engine.engine import Engine
from engine.seam import CancelFlag, HoleInfo, InfillBackend, PromptFormat


def test_engine_satisfies_the_seam():
    eng = Engine.from_pretrained(None, device="cpu", dtype="float32")
    assert isinstance(eng, InfillBackend)
    assert isinstance(eng.prompt_format, PromptFormat)
    assert eng.prompt_format.name == "fim"
    token = eng.new_cancel_token()
    assert isinstance(token, CancelFlag) and not token.cancelled
    hole = HoleInfo(kind="line", language="python", filename="a.py")
    fmt = eng.prompt_format
    ids = fmt.context(eng.encode("def add(a, b):\n    return "), eng.encode("\n"), hole)
    assert ids == fmt.context(eng.encode("def add(a, b):\n    return "), eng.encode("\n"))
    res = eng.infill(ids, canvas_length=min(fmt.canvas_lengths), steps=4, cancel=token)
    assert res.steps >= 1 and not res.cancelled
    assert fmt.answer(res.text) == res.text
    token.cancel()
    stopped = eng.infill(ids, canvas_length=min(fmt.canvas_lengths), steps=4, cancel=token)
    assert stopped.cancelled and stopped.steps == 0
    assert set(eng.settings_in_force()) >= {"steps", "entropy_bound"}
