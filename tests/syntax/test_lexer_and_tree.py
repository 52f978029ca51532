"""Lexical state and the incrementally parsed tree, per language, on broken and half-typed code."""

from __future__ import annotations

import dataclasses
import random

import pytest

from structspec.syntax import load_table
from structspec.syntax.lexer import AFTER, COLON, KEY, VALUE, LexState
from structspec.syntax.shadow import ShadowTree


def lex(language: str, text: str, chunk: int = 0) -> LexState:
    state = LexState(load_table().languages[language])
    if chunk:
        for i in range(0, len(text), chunk):
            state.feed(text[i : i + chunk])
    else:
        state.feed(text)
    return state


def closers(state: LexState) -> str:
    return "".join(e.closer for e in reversed(state.stack))


@pytest.mark.parametrize("chunk", [0, 1, 3])
def test_python_brackets_strings_comments(chunk: int) -> None:
    s = lex("python", "def f(a, b=[1, {'k': (2", chunk)
    assert closers(s) == ")}])" and s.in_code
    s = lex("python", "x = f('a(b', \"c[\" # (((\n", chunk)
    assert closers(s) == ")" and s.in_code
    s = lex("python", 'x = "abc', chunk)
    assert s.string == '"' and not s.in_code
    s = lex("python", 'def f():\n    """Doc (with\n    brackets', chunk)
    assert s.string == '"""' and s.depth == 0
    s = lex("python", 'def f():\n    """Doc."""\n    return (', chunk)
    assert s.string is None and closers(s) == ")"
    s = lex("python", "s = ''\nt = 1 # it's", chunk)
    assert s.comment == "\n"
    s = lex("python", "s = 'it\\'s (' + f(", chunk)
    assert closers(s) == ")"


def test_unterminated_string_recovers_at_the_end_of_the_line() -> None:
    s = lex("python", "x = 'oops\ny = (")
    assert s.string is None and closers(s) == ")"


def test_lines_indentation_and_unit() -> None:
    s = lex("python", "class A:\n    def f(self):\n        return 1\n    x = [\n        1,\n")
    assert s.indent_unit == "    "
    assert s.prev_line == "        1,"
    assert s.depth == 1 and s.line_depth == 1 and s.line == ""
    go = lex("go", "func main() {\n\tif x {\n\t\ty()\n\t}\n}\n")
    assert go.indent_unit == "\t" and go.depth == 0
    js = lex("javascript", "function f() {\n  return [\n    1,\n  ]\n}\n")
    assert js.indent_unit == "  "


def test_c_like_comments_and_strings() -> None:
    s = lex("javascript", "const s = `a ${b} (`; /* ( */ f(x // )\n")
    assert closers(s) == ")"
    s = lex("go", "x := `raw \\` (")
    assert s.in_code and closers(s) == ")"  # raw strings have no escapes: ` closed it
    s = lex("c", "/* open comment (")
    assert s.comment == "*/"
    s = lex("sql", "SELECT f(a -- )\n")
    assert closers(s) == ")"
    s = lex("rust", "fn f<'a>(x: &'a str) -> u8 {")
    assert s.depth == 1 and s.in_code  # lifetimes are not strings (Rust tracks only ")


def test_json_expectations() -> None:
    s = lex("json", '{\n  "name": "x",\n  "dev')
    assert s.string == '"' and s.string_role == KEY
    assert s.stack[-1].string_values
    s = lex("json", '{\n  "a": 1,\n  "b"')
    assert s.stack[-1].expect == COLON
    s = lex("json", '{\n  "a": ')
    assert s.stack[-1].expect == VALUE
    s = lex("json", '{\n  "a": [1, 2]')
    assert s.stack[-1].expect == AFTER and closers(s) == "}"
    s = lex("json", '[\n  {"a": "b"},\n  ')
    assert s.stack[-1].expect == VALUE and s.stack[-1].closer == "]"


def test_object_notation_is_the_tables_property_not_the_name() -> None:
    """JSON's key/value lexing follows ``object_notation``, whatever the language is called."""
    json = load_table().languages["json"]
    assert json.object_notation
    assert not any(
        lang.object_notation for name, lang in load_table().languages.items() if name != "json"
    )
    renamed = LexState(dataclasses.replace(json, name="data"))
    renamed.feed('{\n  "a": 1,\n  "b"')
    assert renamed.stack[-1].expect == COLON
    plain = LexState(dataclasses.replace(json, object_notation=False))
    plain.feed('{\n  "a": 1,\n  "b"')
    assert plain.stack[-1].expect == KEY  # as "{" opened it: nothing after it is followed


def test_html_element_stack() -> None:
    s = lex("html", '<html>\n<body class="a>b">\n  <ul>\n    <li>One<br><img src="x"/>')
    assert [t.closer for t in s.tags] == ["html", "body", "ul", "li"]
    s = lex("html", "<div>\n  <p>a</p>\n  <!-- <span> -->\n  <P>b</P>\n</div>\n<section>")
    assert [t.closer for t in s.tags] == ["section"]
    s = lex("html", "<ul>\n  <li>a\n  <li>b\n</ul>")  # implicitly closed <li>s
    assert s.tags == []
    s = lex("html", "<div>\n  <")
    assert s.in_tag


@pytest.mark.parametrize("language", ["python", "json", "html", "sql", "go", "javascript", "c"])
def test_lexer_survives_random_text(language: str) -> None:
    rng = random.Random(language)
    alphabet = "abc (){}[]<>/\\'\"`#-*:;,.=\n\t "
    for _ in range(50):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 200)))
        s = lex(language, text, chunk=rng.randrange(1, 7))
        t = lex(language, text)
        assert (s.depth, s.string, s.comment, s.line) == (t.depth, t.string, t.comment, t.line)


def sexp(tree: ShadowTree) -> str:
    return str(tree.tree().root_node)


@pytest.mark.parametrize(
    ("language", "text"),
    [
        ("python", "import os\n\nclass A:\n    def f(self, x):\n        return [i for i in x]\n"),
        ("json", '{\n  "a": [1, 2, {"b": null}],\n  "c": "d"\n}\n'),
        ("html", "<ul>\n  <li>One</li>\n  <li>Two <b>bold</b></li>\n</ul>\n"),
        ("go", 'package main\n\nfunc main() {\n\tif x > 0 {\n\t\tfmt.Println("hi")\n\t}\n}\n'),
        ("sql", "CREATE TABLE t (\n  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL\n);\n"),
    ],
)
def test_incremental_parse_equals_full_parse(language: str, text: str) -> None:
    lang = load_table().languages[language]
    inc = ShadowTree(lang)
    inc.reset(b"")
    data = text.encode()
    rng = random.Random(0)
    i = 0
    while i < len(data):
        j = min(len(data), i + rng.randrange(1, 6))
        inc.append(data[i:j])
        inc.tree()  # reparse after every chunk, as the engine does
        i = j
    full = ShadowTree(lang)
    full.reset(data)
    assert sexp(inc) == sexp(full)
    assert inc.full_parses == 1 and inc.parses > 5
    assert inc.line_starts == full.line_starts


def tree_of(language: str, text: str) -> ShadowTree:
    tree = ShadowTree(load_table().languages[language])
    tree.reset(text.encode())
    return tree


def test_cursor_skip_in_strings_and_comments() -> None:
    assert tree_of("python", "x = 1  # a comment").cursor(0).skip
    assert not tree_of("python", 'x = "abc"').cursor(0).skip
    assert not tree_of("c", "int x; /* closed */").cursor(0).skip
    assert tree_of("go", "// hello").cursor(0).skip


def test_cursor_broken_only_for_errors_in_finished_code() -> None:
    half = "def f(x):\n    return x\n\ndef g(y):\n    if y > ("
    t = tree_of("python", half)
    start = t.line_start(4)
    assert not t.cursor(start).broken  # the half-typed tail is expected to be an ERROR
    broken = "def f(x):\n    return x +* ) 2\n\ndef g(y):\n    return y" + "\n" * 3 + "z = ("
    t = tree_of("python", broken)
    assert t.cursor(t.line_start(7)).broken


def test_json_shown_from_its_middle() -> None:
    s = lex("json", '      "type": "string"\n    },\n    "b": {\n      "t')
    assert s.string_role == KEY and [e.closer for e in s.stack] == ["}", "}"]
    s = lex("json", '    "x": 1\n  },\n  {\n    "')
    assert s.string_role == KEY and s.stack[0].closer == "]"  # objects in a list
    s = lex("json", '  "a",\n  "b",\n  "')
    assert s.stack[0].closer == "]" and s.string_role == VALUE
    assert {"a", "b"} <= s.strings
