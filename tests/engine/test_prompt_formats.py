"""Prompt formats per checkpoint: fim / chat / auto selection, clear errors, the chat prompt and its answers."""

import json
import shutil

import pytest
from tokenizers import Tokenizer

from engine.engine import Engine
from engine.prompts import PromptFormatError, load_prompt_format
from engine.prompts.answer import clean_answer, drop_prefix_echo, drop_suffix_echo, unfence
from engine.prompts.chat import MARKER, ChatFormat
from engine.seam import HoleInfo, PromptFormat
from engine.testing.published import build_published_checkpoint
from engine.tokens import InfillFormat

HOLE = HoleInfo(kind="line", language="python", filename="app.py", lines=1)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    return build_published_checkpoint(tmp_path_factory.mktemp("published") / "dg")


@pytest.fixture(scope="module")
def chat_engine(published):
    return Engine.from_pretrained(published, device="cpu", dtype="float32")


def _copy(src, tmp_path, name="ckpt"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def test_auto_picks_fim_when_the_tokenizer_has_fim_tokens(tiny_mixed):
    eng = Engine.from_pretrained(tiny_mixed, device="cpu")
    fmt = eng.prompt_format
    assert fmt.name == "fim" and isinstance(fmt, PromptFormat)
    assert (fmt.fim_prefix_id, fmt.fim_middle_id, fmt.fim_suffix_id) == tuple(
        eng.tokenizer.token_to_id(t) for t in ("<fim_prefix>", "<fim_middle>", "<fim_suffix>"))


def test_auto_picks_chat_for_the_published_layout(chat_engine):
    fmt = chat_engine.prompt_format
    assert fmt.name == "chat" and isinstance(fmt, PromptFormat)
    assert fmt is chat_engine.infill_format  # what the server reads today


def test_fim_without_fim_tokens_is_an_error_not_guessed_ids(published, tmp_path):
    tok = Tokenizer.from_file(str(published / "tokenizer.json"))
    # ids 3/4/5, the old silent fallback, are unrelated tokens in a Gemma tokenizer
    assert [tok.id_to_token(i) for i in (3, 4, 5)] == ["<unk>", "<mask>", "<|turn>"]
    with pytest.raises(PromptFormatError, match="FIM tokens"):
        InfillFormat.load(published, tok)
    with pytest.raises(PromptFormatError, match="FIM tokens"):
        Engine.from_pretrained(published, device="cpu", prompt_format="fim")
    declared = _copy(published, tmp_path)
    InfillFormat().save(declared)  # infill.json declares fim, the tokenizer cannot back it
    with pytest.raises(PromptFormatError, match=r"FIM tokens .*tokenizer\.json"):
        Engine.from_pretrained(declared, device="cpu")


def test_no_declared_format_names_the_missing_files(published, tmp_path):
    bare = _copy(published, tmp_path)
    (bare / "chat_template.jinja").unlink()
    with pytest.raises(PromptFormatError) as err:
        Engine.from_pretrained(bare, device="cpu")
    msg = str(err.value)
    assert "declares no prompt format" in msg
    assert "infill.json" in msg and "chat_template.jinja" in msg and "tokenizer_config.json" in msg


def test_chat_forced_without_a_template_is_an_error(tiny_mixed):
    with pytest.raises(PromptFormatError, match="chat_template.jinja"):
        Engine.from_pretrained(tiny_mixed, device="cpu", prompt_format="chat")
    with pytest.raises(PromptFormatError, match="auto, fim, chat"):
        Engine.from_pretrained(tiny_mixed, device="cpu", prompt_format="markdown")


def test_chat_forced_on_a_fim_checkpoint_with_a_template(published, tiny_mixed, tmp_path):
    both = _copy(tiny_mixed, tmp_path)
    shutil.copy(published / "chat_template.jinja", both / "chat_template.jinja")
    assert Engine.from_pretrained(both, device="cpu").prompt_format.name == "fim"  # auto prefers a declared fim
    assert Engine.from_pretrained(both, device="cpu", prompt_format="chat").prompt_format.name == "chat"


def test_template_in_tokenizer_config_is_found(published, chat_engine, tmp_path):
    moved = _copy(published, tmp_path)
    template = (moved / "chat_template.jinja").read_text()
    (moved / "chat_template.jinja").unlink()
    cfg = json.loads((moved / "tokenizer_config.json").read_text())
    (moved / "tokenizer_config.json").write_text(json.dumps(dict(cfg, chat_template=template)))
    eng = Engine.from_pretrained(moved, device="cpu")
    assert eng.prompt_format.name == "chat"
    assert eng.prompt_format.render("x = ", "\n", HOLE) == chat_engine.prompt_format.render("x = ", "\n", HOLE)


@pytest.mark.parametrize("prefix, suffix", [
    ("import os\n\n", "\nprint(os.sep)\n"),
    ("def add(a, b):\n", "\n\nprint(add(1, 2))\n"),
    ("", "y = 2\n"),
    ("x = 1\n", ""),
])
def test_chat_context_is_the_templates_own_rendering_with_one_bos(chat_engine, prefix, suffix):
    eng, fmt = chat_engine, chat_engine.prompt_format
    ids = fmt.context(eng.encode(prefix), eng.encode(suffix), HOLE)
    text = fmt.render(prefix, suffix, HOLE)
    assert eng.decode(ids) == text
    # prefix/suffix start and end at line boundaries: transformers' apply_chat_template gives the same ids
    assert ids == fmt.template.reference_ids(fmt.messages(prefix, suffix, HOLE))
    bos = eng.config.text.bos_token_id
    assert ids[0] == bos and ids.count(bos) == 1
    assert text.startswith("<bos><|turn>user\n")
    assert text.endswith("<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")  # thinking off
    assert "<|think|>" not in text
    assert f"```python\n{prefix}{MARKER}{suffix}" in text and "`app.py`" in text and "one line" in text


@pytest.mark.parametrize("prefix, suffix, hole", [
    ("import os\n\n", "\nprint(os.sep)\n", HOLE),
    ("", "", HOLE),
    ("Example:\n```sh\nls\n```\n", "\n", HoleInfo(kind="line", language="markdown", filename="README.md")),
    ("s = 'Grüße 😀'\n", "\nt = \"ß\"\n", HoleInfo(kind="statement", language="python", filename="ü.py", lines=3)),
    ("import x\n", "\nfetch()\n", HoleInfo(kind="selection", language="python", filename="io.py", lines=2,
                                            instruction="make it async", replaced="def fetch():\n    return get()",
                                            related=(("lib/util.py", "def get():\n    return 1\n"),))),
])
def test_the_messages_read_back_from_the_ids_are_the_holes_messages(chat_engine, prefix, suffix, hole):
    """What a chat server is sent (dg_lsp.backends.openai) comes from the laid-out ids alone."""
    eng, fmt = chat_engine, chat_engine.prompt_format
    ids = fmt.context(eng.encode(prefix), eng.encode(suffix), hole)
    assert fmt.conversation(ids) == fmt.messages(prefix, suffix, hole)
    assert fmt.conversation(eng.encode("x = 1\n")) is None and fmt.conversation([]) is None  # not a rendering


def test_chat_context_keeps_the_servers_ids_and_budget(chat_engine):
    eng, fmt = chat_engine, chat_engine.prompt_format
    prefix_ids, suffix_ids = eng.encode("def f(x):\n    return x +"), eng.encode(" 1\n")
    ids = fmt.context(prefix_ids, suffix_ids, HOLE)
    assert 0 < len(ids) - len(prefix_ids) - len(suffix_ids) <= fmt.frame_tokens(HOLE)
    start = ids.index(prefix_ids[0])
    assert ids[start:start + len(prefix_ids)] == prefix_ids
    assert fmt.context_budget(1024) == 1024 and fmt.context_budget(10**9) == fmt.max_context_tokens


def test_rewrite_instruction_and_replaced_code_go_into_the_prompt(chat_engine):
    fmt = chat_engine.prompt_format
    hole = HoleInfo(kind="selection", language="python", filename="io.py", lines=2,
                    instruction="  make it async ", replaced="def fetch():\n    return get()")
    text = fmt.render("import x\n", "\nfetch()\n", hole)
    assert "Instruction for the new code: make it async\n" in text
    assert "def fetch():\n    return get()" in text and "rewritten, about 2 lines" in text
    plain = fmt.render("import x\n", "\nfetch()\n", HoleInfo(kind="selection", language="python", filename="io.py"))
    assert "Instruction" not in plain


def test_code_with_fences_gets_a_longer_fence(chat_engine):
    eng, fmt = chat_engine, chat_engine.prompt_format
    prefix, suffix = "Example:\n```sh\nls\n```\n", "\n"
    text = eng.decode(fmt.context(eng.encode(prefix), eng.encode(suffix),
                                  HoleInfo(kind="line", language="markdown", filename="README.md")))
    assert f"````markdown\n{prefix}{MARKER}\n````" in text


def test_canvas_lengths_leave_room_for_a_fenced_answer(tmp_path):
    path = build_published_checkpoint(tmp_path / "c256", canvas_length=256)
    eng = Engine.from_pretrained(path, device="cpu")
    fmt = eng.prompt_format
    assert isinstance(fmt, ChatFormat) and max(fmt.canvas_lengths) == 256
    assert fmt.canvas_headroom > 0 and InfillFormat.canvas_headroom == 0
    for target in (16, 32, 64):  # the server's hole targets
        canvas = next(n for n in sorted(fmt.canvas_lengths) if n >= target + fmt.canvas_headroom)
        assert canvas - (target + fmt.canvas_headroom) < 8  # no more than a rounding's worth wasted
        code = eng.decode(eng.encode("x = [1, 2, 3]\n" * 40)[:target])
        for lang in ("python", "typescriptreact", "rust"):
            answer = eng.encode(f"```{lang}\n{code}\n```") + [eng.tokenizer.token_to_id("<turn|>")]
            assert len(answer) <= canvas, (target, lang, len(answer), canvas)


def test_answer_is_the_code_only(chat_engine):
    fmt = chat_engine.prompt_format
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    assert fmt.answer("a + b<turn|>\n<|turn>user\nmore", prefix, suffix) == "a + b"
    assert fmt.answer("```python\na + b\n```\nThis adds them.", prefix, suffix) == "a + b"
    assert fmt.answer("Here you go:\n```python\n    return a + b\n```", prefix, suffix) == "a + b"
    assert fmt.answer(f"{MARKER}a + b", prefix, suffix) == "a + b"
    assert fmt.answer("<|channel>thought\nsum them<channel|>a + b", prefix, suffix) == "a + b"
    assert fmt.answer("a + b\n\nprint(add(1, 2))", prefix, suffix) == "a + b"
    assert fmt.answer("a + b", prefix, suffix) == "a + b"


@pytest.mark.parametrize("text, want", [
    ("```py\nx = 1\n```", "x = 1"),
    ("```\nx = 1\ny = 2", "x = 1\ny = 2"),  # unclosed fence: to the end
    ("x = 1\n```", "x = 1"),  # a lone closing fence
    ("````md\n```sh\nls\n```\n````", "```sh\nls\n```"),  # a longer fence keeps inner fences
    ("no fences", "no fences"),
])
def test_unfence(text, want):
    assert unfence(text) == want


@pytest.mark.parametrize("text, prefix, want", [
    ("    return a + b", "def f(a, b):\n    return ", "a + b"),
    ("return a + b", "def f(a, b):\n    return ", "a + b"),  # restated without its indentation
    ("def f(a, b):\n    return a", "def f(a, b):\n    return ", "a"),  # several lines restated
    ("a + b", "def f(a, b):\n    return ", "a + b"),
    ("    x = 1", "def f():\n    ", "    x = 1"),  # blank indentation is not an echo (the server reindents)
])
def test_prefix_echo(text, prefix, want):
    assert drop_prefix_echo(text, prefix) == want


@pytest.mark.parametrize("text, suffix, want", [
    ("a + b\nprint(x)", "\nprint(x)\n", "a + b"),
    ("x)", ")\n", "x)"),  # a closer on the cursor's line is the server's business (doubled closers)
    ("y = 2\nprint(x)\n", "print(x)\nmore\n", "y = 2\n"),
    ("y = 2", "\nprint(x)\n", "y = 2"),
])
def test_suffix_echo(text, suffix, want):
    assert drop_suffix_echo(text, suffix) == want


def test_clean_answer_stops_at_the_first_end_of_turn():
    assert clean_answer("x<eos>y<turn|>", stops=("<turn|>", "<eos>")) == "x"
    assert clean_answer("<think>hmm", thinking=("<think>", "</think>")) == ""  # unclosed thought drops the rest


def test_tokenizerless_checkpoint_keeps_the_id_api(tmp_path):
    from engine.testing.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path / "ids", with_tokenizer=False)
    eng = Engine.from_pretrained(path, device="cpu")
    assert eng.infill([2, 5, 7], canvas_length=16, steps=2).steps >= 1
    with pytest.raises(PromptFormatError, match="no tokenizer.json"):
        eng.prompt_format  # noqa: B018
    with pytest.raises(PromptFormatError, match="no tokenizer.json"):
        load_prompt_format(path, None, eng.config, "fim")
