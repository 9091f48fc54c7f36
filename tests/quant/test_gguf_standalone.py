"""A GGUF with nothing beside it: the engine tokenizes with the tokenizer rebuilt from its `tokenizer.ggml.*`
metadata (token ids equal the HF tokenizer's on a multilingual code corpus) and prompts with its
`tokenizer.chat_template`; an HF tokenizer.json beside the file still wins."""

from __future__ import annotations

import shutil

import pytest
from gguf_checkpoints import GGUF_SHAPE
from tokenizers import Tokenizer

from engine.engine import Engine, default_model_path
from engine.formats import gguf as G
from engine.formats import gguf_write as W
from engine.testing.published import CHAT_TEMPLATE, VOCAB_SIZE, gemma_style_tokenizer
from engine.testing.tiny import build_tiny_checkpoint
from engine.tools.check import run_check

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "import os\nfrom pathlib import Path\n\nROOT = Path(__file__).parent\n",
    "class Stack:\n    def __init__(self):\n        self.items: list[int] = []\n",
    "    async def fetch(self, url: str) -> bytes:\n        return await self._session.get(url)\n",
    "x = [i ** 2 for i in range(10) if i % 3 == 0]\n",
    "print(f\"{name!r:>10} = {value:.3f}\")\n",
    "@dataclass(frozen=True)\nclass P:\n    x: float = 0.0\n",
    "try:\n    1 / 0\nexcept ZeroDivisionError as exc:\n    raise ValueError('no') from exc\n",
    "const add = (a, b) => a + b;\n",
    "function fib(n) {\n  return n < 2 ? n : fib(n - 1) + fib(n - 2);\n}\n",
    "export default { name: 'app', data() { return { count: 0 }; } };\n",
    "document.querySelector('#id').addEventListener('click', (e) => e.preventDefault());\n",
    "let s = `template ${literal} with ${a + b}`;\n",
    "interface User { id: number; name?: string }\n",
    "fn main() { println!(\"你好, 世界 🌍\"); }\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n",
    "# 日本語のコメント\n名前 = \"値\"\n",
    "// 中文注释：计算总和\nint sum = 0;\n",
    "# 한국어 주석\nprint('안녕하세요')\n",
    "# Комментарий по-русски\nprint('привет, мир')\n",
    "def größe(x):\n    return x  # Größe, naïve café\n",
    "emoji = ['😀', '🚀', '👍🏽', '🇯🇵', '👨‍👩‍👧']\n",
    "s = 'ÿ\\x00\\t tab'  # ½ ¼ ∑ ∫ ≤ ≥\n",
    "          \n",
    "\t\t\tindented with tabs\n\t\n",
    "a    =    1   # runs of spaces   \n\n\n\n",
    "\r\nwindows\r\nline\r\nendings\r\n",
    "    \n        \n            return\n",
    "",
    " ",
    "\n",
    "<bos>mixed <|turn>user\nspecial<turn|> tokens <|channel>thought\n<channel|>",
    "<fim_prefix>not special here<fim_suffix>",
    "mañana über façade ångström",
    "if (a && b || !c) { x->y = *p; } // 🔥 hot path\n",
    "λx. x + 1  -- Ωmega ∀ ∃\n",
]


@pytest.fixture(scope="module")
def chat_gguf(tmp_path_factory):
    """A tiny DiffusionGemma with a Gemma-style tokenizer and a chat template (HF files), its F32 GGUF alone in a
    directory (tokenizer and template only in the metadata)."""
    root = tmp_path_factory.mktemp("gguf_alone")
    src = build_tiny_checkpoint(root / "hf", GGUF_SHAPE, canvas_length=16, seed=7, vocab_size=VOCAB_SIZE)
    (src / "infill.json").unlink()
    gemma_style_tokenizer().save(str(src / "tokenizer.json"))
    (src / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (root / "alone").mkdir()
    return src, W.write_gguf(src, root / "alone" / "model-F32.gguf", "F32")


def test_tokenizer_and_template_come_from_the_metadata(chat_gguf):
    src, path = chat_gguf
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    assert eng.tokenizer_source == G.TOKENIZER_SOURCE
    assert eng.prompt_format.name == "chat" and eng.prompt_format.template.source == G.TEMPLATE_SOURCE
    hf = Tokenizer.from_file(str(src / "tokenizer.json"))
    for text in CORPUS:
        want = hf.encode(text, add_special_tokens=False).ids
        assert eng.encode(text) == want, text
        assert eng.decode(want) == hf.decode(want, skip_special_tokens=False), text


def test_chat_fill_equals_the_hf_checkpoints(chat_gguf):
    """Same prompt ids and the same fill as the safetensors checkpoint with its HF tokenizer and template files."""
    src, path = chat_gguf
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32", sampler={"steps": 6})
    ref = Engine.from_pretrained(src, device="cpu", dtype="float32", sampler={"steps": 6})
    assert ref.prompt_format.template.source == "chat_template.jinja"
    prefix, suffix = "def total(xs):\n    # 合計を返す\n    return ", "\n\nprint(total([1, 2]))\n"
    ids = eng.context_ids(prefix, suffix)
    assert ids == ref.context_ids(prefix, suffix)
    assert "<|turn>user" in eng.decode(ids) and eng.decode(ids).endswith("<|turn>model\n<|channel>thought\n<channel|>")
    got, want = eng.infill(ids, canvas_length=16), ref.infill(ids, canvas_length=16)
    assert got.ids == want.ids and got.steps >= 1
    assert eng.prompt_format.answer(got.text, prefix, suffix) == ref.prompt_format.answer(want.text, prefix, suffix)


def test_check_names_both_sources_and_fills(chat_gguf):
    _, path = chat_gguf
    out = run_check(str(path), device="cpu", dtype="float32", sampler={"steps": 4})
    assert out["ok"], out.get("error")
    assert out["checkpoint"]["tokenizer"] == G.TOKENIZER_SOURCE
    assert out["checkpoint"]["chat_template"] == G.TEMPLATE_SOURCE
    assert out["prompt_format"] == "chat" and isinstance(out["fill"], str) and out["steps"] >= 1


def test_hf_files_beside_the_file_win(chat_gguf, tmp_path):
    src, path = chat_gguf
    shutil.copy(path, tmp_path / path.name)
    (tmp_path / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    (tmp_path / "chat_template.jinja").write_text(CHAT_TEMPLATE.replace("<|turn>model\\n", "<|turn>model\\n\\n"))
    eng = Engine.from_pretrained(tmp_path / path.name, device="cpu", dtype="float32")
    assert eng.tokenizer_source.endswith("tokenizer.json (beside the checkpoint)")
    assert eng.prompt_format.template.source == "chat_template.jinja"
    assert eng.decode(eng.context_ids("a = ", "\n")).endswith("<|turn>model\n\n<|channel>thought\n<channel|>")


def test_shipped_model_gguf_alone_tokenizes_and_fills_as_the_shipped_model(tmp_path):
    """The shipped byte-level tokenizer (llama.cpp's "gpt2") rebuilt from the metadata; the Q8_0 file fills."""
    path = W.write_shipped(tmp_path)
    eng = Engine.from_pretrained(path, device="cpu", dtype="float32")
    ref = Engine.from_pretrained(default_model_path(), device="cpu", dtype="float32")
    assert eng.tokenizer_source == G.TOKENIZER_SOURCE and eng.prompt_format.name == "fim"
    for text in CORPUS:
        assert eng.encode(text) == ref.encode(text), text
    for name, value in vars(ref.config.sampler).items():  # generation_config.json's, as diffusion.eb_* (float32)
        assert getattr(eng.config.sampler, name) == pytest.approx(value, rel=1e-6), name
    res = eng.infill_text("def add(a, b):\n    return ", "\n")
    assert res.steps >= 1 and res.ids
