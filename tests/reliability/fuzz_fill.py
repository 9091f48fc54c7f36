"""The property suite's worker (issue 21): hypothesis generates documents of one grammar and runs the whole fill path
that touches native code on user text against the real grammars and the default checkpoint's tokenizer.

Per example: open a `Document` (whole or in slices: the read-callback parse), apply incremental edits in a random
position encoding, take a snapshot (fresh, or stale: the last tree with the edits applied), find the hole at a cursor
or selection anywhere, build the prompt (tokenizer), prepare the syntax gate's baseline (or not), cut a random "model
answer" with the prompt format and post-process it (filters, syntax gate: tree-sitter and CPython's parser), and
build the LSP items. A Python exception is a failure (hypothesis shrinks it); a native crash kills this process,
which is why it runs apart: `test_fuzz_fill.py` starts it, reads its last line (JSON), and on a crash reads the file
where each example was written before it ran.

Cost: 7-17 ms of CPU per example (about 2 ms of it hypothesis' drawing: one draw per piece of text, see `piece`),
most of the rest tree-sitter parsing documents of garbage; long pieces are `n` characters (not `n` repetitions of a
pattern: 6,000 lines of `x = 1` cost a Rust parse 280 ms).

`python -m tests.reliability.fuzz_fill LANGUAGE EXAMPLES SEED CURRENT_FILE`
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from dg_lsp.documents import Document
from dg_lsp.fill.cache import MemoEncoder
from dg_lsp.fill.edits import lsp_completion_item, lsp_inline_item, lsp_text_edit, postprocess, to_lsp_range
from dg_lsp.fill.holes import hole_at_cursor, hole_for_selection
from dg_lsp.fill.prompt import build_prompt
from dg_lsp.fill.syntax import COMMAND_PARSE_BYTES, KEYSTROKE_PARSE_BYTES, prepare_check
from dg_lsp.languages import LANGUAGE_IDS
from engine.tokens import InfillFormat, splits_before_newline

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "engine" / "default_model"
ENCODINGS = ("utf-8", "utf-16", "utf-32")

# Short pieces every grammar cares about: brackets (unbalanced as drawn), quotes, comment and string openers, block
# openers, keywords, indentation, the three line endings, non-ASCII (2, 3 and 4 UTF-8 bytes, a line separator that
# is not a line break for LSP, U+FFFD, NUL).
COMMON = ["(", ")", "[", "]", "{", "}", "'", '"', "`", "\\", ";", ":", ",", ".", "=", "+", "<", ">", "#", "//",
          "/*", "*/", "x", "y1", "_a", "42", "0x1f", " ", "    ", "\t", "\n", "\r\n", "\r", "\n\n", "é", "日本",
          "😀", "𝔘", "\u2028", "\ufffd", "\x00", "return ", "if ", "def ", "fn ", "func ", "class ", "let ",
          "function ", "int ", "#include ", "import ", "else", "pass"]
SNIPPETS = {
    "python": ["def f(a, b):\n    return a + b\n", "class C:\n    x: int = 1\n", "if x:\n    pass\nelse:\n",
               "s = '''doc\n", "f'{x}'", "lambda: (", "@dec\n", "async def g():\n    await h()\n"],
    "javascript": ["function f(a, b) {\n  return a + b;\n}\n", "const o = { a: 1, b: [2, 3] };\n", "`${x}`",
                   "() => {", "class A extends B {\n  m() {}\n}\n", "/re[gx]/g", "<div>{x}</div>"],
    "typescript": ["function f(a: number): string {\n  return `${a}`;\n}\n", "interface I { x: number }\n",
                   "type T<U> = U[];\n", "enum E { A, B }\n", "let x: Array<number> = [];\n"],
    "tsx": ["const A = () => <div className=\"a\">{x}</div>;\n", "function f<T,>(a: T) {\n  return a;\n}\n"],
    "rust": ["fn f(a: i32) -> i32 {\n    a + 1\n}\n", "impl S {\n    fn m(&self) {}\n}\n", "r#\"raw\"#",
             "let v: Vec<u8> = vec![1, 2];\n", "match x {\n    1 => {}\n    _ => {}\n}\n", "'a'", "b'x'"],
    "go": ["func f(a int) int {\n\treturn a\n}\n", "package main\n", "type S struct {\n\tX int\n}\n", "`raw`",
           "for i := 0; i < n; i++ {\n", "x := []int{1, 2}\n"],
    "java": ["class A {\n    void m() {}\n}\n", "int x = 1;\n", "\"\"\"\ntext\n\"\"\"", "@Override\n",
             "List<String> xs = new ArrayList<>();\n", "switch (x) {\n case 1 -> y;\n}\n"],
    "c": ["int f(int a) {\n    return a;\n}\n", "#include <stdio.h>\n", "struct s { int x; };\n", "#define M(x) (x)\n",
          "char *s = \"a\\n\";\n", "for (;;) {\n"],
    "cpp": ["template <typename T>\nT f(T a) {\n    return a;\n}\n", "namespace n {\n}\n",
            "std::vector<int> v{1, 2};\n", "R\"(raw)\"", "class A : public B {\npublic:\n    A() = default;\n};\n",
            "auto l = [&](int x) { return x; };\n"],
}
# Long tokens (identifiers, strings, comments, base64, whitespace) and long runs of lines, `n` characters of a repeated
# pattern. Deep bracket runs come from "nest" (thousands of unclosed brackets make tree-sitter's error recovery slow,
# not unsafe).
LONG_CHARS = ["a", "é", "😀", " ", "'", "\n", "x = 1\n", "Zm9v+/="]
NEST_OPENERS = ["(", "[", "{", "{\n", "(\n    "]
NEST_DEPTHS = 80


def piece(short: list[str], long_sizes: tuple[int, ...], v: int) -> str | tuple:
    """One piece from one drawn integer (hypothesis draws one number per piece, not a choice and then its fields: a
    draw costs ~0.1 ms, more than most examples' own work): 8 in 10 short text, 1 in 10 ("long", chars, n) =
    `n` characters of `chars` repeated, 1 in 10 ("nest", opener, depth) = opener * depth. 0 is the simplest, "(",
    where hypothesis shrinks to."""
    kind, i = v % 10, v // 10
    if kind < 8:
        return short[i % len(short)]
    if kind == 8:
        return "long", LONG_CHARS[i % len(LONG_CHARS)], long_sizes[i // len(LONG_CHARS) % len(long_sizes)]
    return "nest", NEST_OPENERS[i % len(NEST_OPENERS)], 1 + i // len(NEST_OPENERS) % NEST_DEPTHS


def pieces(key: str, long_sizes: tuple[int, ...] = (300, 4_100, 6_000), max_size: int = 12) -> st.SearchStrategy:
    """A document as a list of pieces (see `piece`; kept symbolic so that an example prints small)."""
    short = COMMON + SNIPPETS[key]
    return st.lists(st.integers(0, 1 << 16).map(lambda v: piece(short, long_sizes, v)), max_size=max_size)


def build(parts: list) -> str:
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        elif p[0] == "long":
            chars, n = p[1], p[2]
            out.append((chars * -(-n // len(chars)))[:n])
        else:
            out.append(p[1] * p[2])
    return "".join(out)


def example(key: str) -> st.SearchStrategy:
    frac = st.floats(0, 1)
    edit = st.tuples(frac, frac, pieces(key, max_size=3), st.sampled_from(ENCODINGS))
    return st.fixed_dictionaries({
        "language_id": st.sampled_from(sorted(i for i, k in LANGUAGE_IDS.items() if k == key)),
        "text": pieces(key),
        "open_budget": st.sampled_from([None, None, 0.0005]),  # 0.0005: opened in slices (the read callback)
        "edits": st.lists(edit, max_size=2),
        "snapshot_budget": st.sampled_from([None, 0.0]),  # 0.0: a stale tree with the edits applied
        "encoding": st.sampled_from(ENCODINGS),
        "cursor": st.tuples(frac, frac, st.integers(-2, 3)),  # where, the selection's other end, past-the-end lines
        "selection": st.sampled_from([None, "plain", "widen"]),
        "budget_tokens": st.sampled_from([16, 128, 1024]),
        "prepare": st.booleans(),
        "answer": pieces(key, (40, 300), max_size=8),  # an engine answer: canvas-sized
        "command": st.sampled_from([False] * 19 + [True]),  # 400 KB of parsing
    })


def position(doc: Document, frac: float, encoding: str) -> tuple[int, int]:
    offset = int(frac * len(doc.text))
    return doc.snapshot(0.0).position_at(offset, encoding)  # type: ignore[arg-type]


def run(ex: dict, encode: MemoEncoder, fmt: InfillFormat) -> None:
    doc = Document("file:///fuzz", ex["language_id"], 1, build(ex["text"]), ex["open_budget"])
    while ex["open_budget"] is not None and not doc.parse(ex["open_budget"]):
        pass
    for version, (a, b, new, enc) in enumerate(ex["edits"], 2):
        (l0, c0), (l1, c1) = position(doc, a, enc), position(doc, b, enc)
        change = {"range": {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}},
                  "text": build(new)}
        doc.apply_changes([change], version, enc)
    snap = doc.snapshot(ex["snapshot_budget"])
    enc = ex["encoding"]
    a, b, extra = ex["cursor"]
    line, char = snap.position_at(int(a * len(snap.text)), enc)
    cursor = snap.offset_at(line + max(extra, 0), char + 3 * max(extra, 0), enc)
    if ex["selection"] is None:
        hole = hole_at_cursor(snap, cursor)
    else:
        hole = hole_for_selection(snap, cursor, int(b * len(snap.text)), ex["selection"] == "widen")
    assert 0 <= hole.start <= hole.end <= len(snap.text) and snap.text[hole.start:hole.end] == hole.replaced
    prompt = build_prompt(snap, hole, encode, fmt, ex["budget_tokens"])
    check = prepare_check(snap, hole) if ex["prepare"] else None
    code = fmt.answer(build(ex["answer"]), prompt.prefix, prompt.suffix)
    fill = postprocess(snap, hole, code, check, COMMAND_PARSE_BYTES if ex["command"] else KEYSTROKE_PARSE_BYTES)
    assert fill is None or isinstance(fill, str)
    to_lsp_range(snap, hole.start, hole.end, enc)
    if fill:
        lsp_inline_item(snap, hole, cursor, fill, enc)
        lsp_completion_item(snap, hole, cursor, fill, enc)
        lsp_text_edit(snap, hole, fill, enc)


def main() -> None:
    key, n_examples, seed_value, current = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    tok = Tokenizer.from_file(str(CHECKPOINT / "tokenizer.json"))
    fmt = InfillFormat.load(CHECKPOINT, tok)
    encode = MemoEncoder(lambda s: tok.encode(s, add_special_tokens=False).ids,
                         split_before_newline=splits_before_newline(tok))
    ran = [0]

    @seed(seed_value)
    @settings(max_examples=n_examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(ex=example(key))
    def prop(ex: dict) -> None:
        ran[0] += 1
        current.write_text(repr(ex))  # read back by the test if this process dies (a native crash)
        run(ex, encode, fmt)

    failure = None
    try:
        prop()
    except Exception as e:  # noqa: BLE001 -- reported to the test as data, with hypothesis' falsifying example
        failure = "".join(traceback.format_exception(e))[-6000:]
    print(json.dumps({"language": key, "examples": ran[0], "failure": failure}))


if __name__ == "__main__":
    main()
