"""LSP languageId -> tree-sitter grammar, plus the per-language node-type tables the hole logic reads."""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field, replace
from functools import cache

import tree_sitter


@dataclass(frozen=True)
class LangSpec:
    """Node types of one grammar that hole finding, prompt building and the syntax gate care about.

    statements: nodes that are one statement/declaration (the "statement" hole and scope walking).
    blocks:     nodes holding a body of statements between `{`/`}` or after `:` (the "block_body" hole).
    brackets:   nodes whose first and last children are a matching bracket pair with an expression list inside
                (the "bracket_expr" hole): argument lists, arrays, tuples, dict/object literals.
    scopes:     definitions whose header (signature) is kept in the prompt when the cursor is inside them.
    imports:    top-level nodes kept at the head of the prompt.
    opaque:     nodes inside which syntax holes make no sense (strings, comments): rest-of-line only.
    colon_blocks: bodies open with `:` and are delimited by indentation (Python), not braces.
    indent:     the indentation step when the file shows none (gofmt uses tabs).
    """

    key: str
    statements: frozenset[str]
    blocks: frozenset[str]
    brackets: frozenset[str]
    scopes: frozenset[str]
    imports: frozenset[str]
    opaque: frozenset[str] = field(default_factory=frozenset)
    colon_blocks: bool = False
    indent: str = "    "


def _fs(*names: str) -> frozenset[str]:
    """`_fs("a b", "c")` -> {"a", "b", "c"}: whitespace-separated names keep the tables short."""
    return frozenset(n for chunk in names for n in chunk.split())


_C_STATEMENTS = _fs(
    "expression_statement declaration return_statement if_statement for_statement",
    "while_statement do_statement switch_statement break_statement continue_statement",
    "goto_statement labeled_statement compound_statement function_definition struct_specifier",
    "type_definition preproc_include preproc_def field_declaration",
)
_C_BRACKETS = _fs(
    "argument_list parameter_list parenthesized_expression initializer_list",
    "subscript_expression array_declarator condition_clause",
)
_JS_STATEMENTS = _fs(
    "expression_statement lexical_declaration variable_declaration return_statement",
    "if_statement for_statement for_in_statement while_statement do_statement",
    "switch_statement try_statement throw_statement break_statement continue_statement",
    "function_declaration generator_function_declaration class_declaration import_statement",
    "export_statement statement_block method_definition field_definition",
    "public_field_definition empty_statement labeled_statement",
)
_JS_BLOCKS = _fs("statement_block class_body switch_body")
_JS_BRACKETS = _fs(
    "arguments formal_parameters array object parenthesized_expression subscript_expression",
    "template_substitution object_pattern array_pattern named_imports",
)
_JS_SCOPES = _fs(
    "function_declaration generator_function_declaration class_declaration method_definition",
    "function_expression arrow_function class",
)
_TS_EXTRA_STATEMENTS = _fs(
    "interface_declaration type_alias_declaration enum_declaration abstract_class_declaration",
    "module internal_module property_signature method_signature",
)
_TS_BLOCKS = _JS_BLOCKS | _fs("interface_body enum_body object_type")
_TS_BRACKETS = _JS_BRACKETS | _fs("type_arguments type_parameters tuple_type")
_TS_SCOPES = _JS_SCOPES | _fs(
    "interface_declaration abstract_class_declaration enum_declaration internal_module"
)

SPECS: dict[str, LangSpec] = {
    "python": LangSpec(
        key="python",
        statements=_fs(
    "expression_statement return_statement if_statement for_statement while_statement",
    "try_statement with_statement function_definition class_definition decorated_definition",
    "import_statement import_from_statement pass_statement break_statement continue_statement",
    "raise_statement assert_statement delete_statement global_statement nonlocal_statement",
    "match_statement type_alias_statement future_import_statement",
),
        blocks=_fs("block"),
        brackets=_fs(
    "argument_list parameters list tuple dictionary set parenthesized_expression subscript",
    "list_comprehension dictionary_comprehension set_comprehension generator_expression",
    "type_parameter",
),
        scopes=_fs("function_definition class_definition"),
        imports=_fs("import_statement import_from_statement future_import_statement"),
        opaque=_fs("string comment concatenated_string"),
        colon_blocks=True,
    ),
    "javascript": LangSpec(
        key="javascript", statements=_JS_STATEMENTS, blocks=_JS_BLOCKS, brackets=_JS_BRACKETS,
        scopes=_JS_SCOPES,
        imports=_fs("import_statement"), opaque=_fs("string template_string comment regex"),
    ),
    "typescript": LangSpec(
        key="typescript", statements=_JS_STATEMENTS | _TS_EXTRA_STATEMENTS, blocks=_TS_BLOCKS,
        brackets=_TS_BRACKETS, scopes=_TS_SCOPES, imports=_fs("import_statement"),
        opaque=_fs("string template_string comment regex"),
    ),
    "rust": LangSpec(
        key="rust",
        statements=_fs(
    "expression_statement let_declaration function_item struct_item enum_item impl_item",
    "trait_item mod_item use_declaration const_item static_item type_item macro_invocation",
    "attribute_item empty_statement function_signature_item macro_definition",
),
        blocks=_fs("block declaration_list field_declaration_list enum_variant_list match_block"),
        brackets=_fs(
    "arguments parameters array_expression tuple_expression parenthesized_expression",
    "type_arguments type_parameters token_tree index_expression field_initializer_list",
    "tuple_pattern tuple_type",
),
        scopes=_fs("function_item impl_item trait_item mod_item struct_item enum_item"),
        imports=_fs("use_declaration extern_crate_declaration"),
        opaque=_fs("string_literal raw_string_literal line_comment block_comment char_literal"),
    ),
    "go": LangSpec(
        key="go",
        statements=_fs(
    "expression_statement short_var_declaration assignment_statement var_declaration",
    "const_declaration type_declaration return_statement if_statement for_statement",
    "expression_switch_statement type_switch_statement select_statement go_statement",
    "defer_statement function_declaration method_declaration inc_statement dec_statement",
    "send_statement break_statement continue_statement labeled_statement import_declaration",
    "package_clause",
),
        blocks=_fs("block field_declaration_list interface_type statement_list"),
        brackets=_fs(
    "argument_list parameter_list literal_value parenthesized_expression index_expression",
    "type_arguments type_parameter_list",
),
        scopes=_fs("function_declaration method_declaration func_literal type_declaration"),
        imports=_fs("package_clause import_declaration"),
        opaque=_fs("interpreted_string_literal raw_string_literal comment rune_literal"),
        indent="\t",
    ),
    "java": LangSpec(
        key="java",
        statements=_fs(
    "expression_statement local_variable_declaration return_statement if_statement",
    "for_statement enhanced_for_statement while_statement do_statement switch_expression",
    "try_statement throw_statement break_statement continue_statement method_declaration",
    "constructor_declaration field_declaration class_declaration interface_declaration",
    "enum_declaration record_declaration import_declaration package_declaration block",
),
        blocks=_fs("block class_body interface_body enum_body constructor_body switch_block"),
        brackets=_fs(
    "argument_list formal_parameters parenthesized_expression array_initializer array_access",
    "type_arguments dimensions_expr",
),
        scopes=_fs(
    "class_declaration interface_declaration enum_declaration record_declaration",
    "method_declaration constructor_declaration",
),
        imports=_fs("package_declaration import_declaration"),
        opaque=_fs("string_literal line_comment block_comment character_literal text_block"),
    ),
    "c": LangSpec(
        key="c", statements=_C_STATEMENTS,
        blocks=_fs("compound_statement field_declaration_list enumerator_list"),
        brackets=_C_BRACKETS, scopes=_fs("function_definition struct_specifier"),
        imports=_fs("preproc_include"), opaque=_fs("string_literal comment char_literal system_lib_string"),
    ),
    "cpp": LangSpec(
        key="cpp",
        statements=_C_STATEMENTS | _fs(
    "class_specifier namespace_definition template_declaration using_declaration",
    "alias_declaration try_statement throw_statement for_range_loop",
),
        blocks=_fs("compound_statement field_declaration_list enumerator_list declaration_list"),
        brackets=_C_BRACKETS | _fs("template_argument_list template_parameter_list"),
        scopes=_fs("function_definition struct_specifier class_specifier namespace_definition"),
        imports=_fs("preproc_include using_declaration"),
        opaque=_fs("string_literal raw_string_literal comment char_literal system_lib_string"),
    ),
}
SPECS["tsx"] = replace(SPECS["typescript"], key="tsx")

# LSP languageId -> our grammar key. JSX parses with the JavaScript grammar; TSX needs its own.
LANGUAGE_IDS: dict[str, str] = {
    "python": "python",
    "javascript": "javascript",
    "javascriptreact": "javascript",
    "typescript": "typescript",
    "typescriptreact": "tsx",
    "rust": "rust",
    "go": "go",
    "java": "java",
    "c": "c",
    "cpp": "cpp",
}

# grammar key -> (wheel module, function returning the language capsule)
_WHEELS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "rust": ("tree_sitter_rust", "language"),
    "go": ("tree_sitter_go", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}


def grammar_key(language_id: str) -> str | None:
    """Our grammar key for an LSP languageId, or None (the line-based fallback)."""
    return LANGUAGE_IDS.get(language_id)


@cache
def language(key: str) -> tree_sitter.Language | None:
    """The tree-sitter Language for a grammar key, loaded once per process; None if the wheel is missing."""
    if key not in _WHEELS:
        return None
    module, fn = _WHEELS[key]
    try:
        return tree_sitter.Language(getattr(importlib.import_module(module), fn)())
    except (ImportError, AttributeError):
        return None


def spec(key: str | None) -> LangSpec | None:
    return SPECS.get(key) if key else None


def parser(key: str) -> tree_sitter.Parser | None:
    """A fresh parser (parsers are not thread-safe, so each caller gets its own; they are cheap)."""
    lang = language(key)
    return tree_sitter.Parser(lang) if lang is not None else None


# py-tree-sitter (0.25 and 0.26) never drops the reference its read-callback wrapper gets back from the callback: it
# releases the buffer view it took of the returned object, not the object itself, so every object a `Parser.parse`
# read callback returns lives until the process ends. Fresh `bytes` per call (as this module returned before) leaked
# about twice the document's bytes per parse (the lexer reads some chunks twice): most of what stayed resident after
# closing many big documents parsed in slices (issue 21). So the callback returns one bytearray per thread, refilled
# at each call (the wrapper has released its view of it by then): the leaked references pile up on an object that
# lives anyway. tests/reliability/test_tree_sitter_bugs.py keeps the reproduction.
READ_CHUNK = 4096
_scratch = threading.local()  # .buf: this thread's read buffer (parsers are per thread; see `parser`)


def _read_buffer() -> bytearray:
    buf = getattr(_scratch, "buf", None)
    if buf is None:
        buf = _scratch.buf = bytearray()
    return buf


def parse_until(p: tree_sitter.Parser, data: bytes, old: tree_sitter.Tree | None = None,
                deadline: float | None = None) -> tree_sitter.Tree | None:
    """Parse `data` (incrementally from `old`, already `Tree.edit`ed); None when `deadline` (a
    `time.perf_counter()` value) passed first. A stopped parse resumes where it stopped on the next call with the
    same input, unless `p.reset()` is called."""
    if deadline is None:  # no callbacks into Python: about twice as fast
        return p.parse(data, old) if old is not None else p.parse(data)

    def stop(*_: object) -> bool:  # must not raise: py-tree-sitter reads its result without checking for an error
        return time.perf_counter() > deadline

    buf, view = _read_buffer(), memoryview(data)

    def read(byte: int, _point: object) -> bytearray:
        buf[:] = view[byte:byte + READ_CHUNK]  # the chunk at `byte` (empty at the end: the parse ends there)
        return buf

    try:
        return p.parse(read, old, progress_callback=stop) if old is not None else p.parse(read, progress_callback=stop)
    except ValueError:  # py-tree-sitter's "Parsing failed": the progress callback stopped it
        return None
    finally:
        view.release()
