"""The document store: many edits in one ``didChange`` give the text one-by-one edits give."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.completion import documents
from structspec.completion.documents import ENCODINGS, DocumentStore, Range, TextChange

#: Text with every LSP line break, a lone ``\r`` next to a ``\n`` to be, and non-ASCII.
_CHARS = st.sampled_from(list("ab \t\r\n") + ["\r\n", "é", "😀"])
_TEXT = st.lists(_CHARS, max_size=40).map("".join)
_EDIT = st.one_of(
    st.builds(
        lambda a, b, c, d, text: TextChange(text, Range(a, b, c, d)),
        *(st.integers(-1, 8) for _ in range(4)),
        _TEXT,
    ),
    _TEXT.map(TextChange),  # a whole-text change in the middle of the batch
)


def _one_by_one(text: str, changes: list[TextChange], encoding: str) -> tuple[str, int | None]:
    store = DocumentStore(encoding)
    store.open("u", "python", 1, text)
    doc = store.get("u")
    assert doc is not None
    for change in changes:  # one change per didChange: the text path
        store.change("u", 2, [change])
    return doc.text, doc.edited_at


@settings(max_examples=400, deadline=None)
@given(
    _TEXT,
    st.lists(_EDIT, min_size=documents._EDITS_ONE_BY_ONE + 1, max_size=20),
    st.sampled_from(ENCODINGS),
)
def test_a_batch_of_edits_gives_the_text_and_cursor_of_one_by_one(text, changes, encoding):
    store = DocumentStore(encoding)
    store.open("u", "python", 1, text)
    doc = store.change("u", 2, changes)
    expected_text, expected_at = _one_by_one(text, changes, encoding)
    assert doc.text == expected_text
    assert doc.edited_at == expected_at
    fresh = documents.Document("u", "python", 2, doc.text)
    assert doc.line_starts() == fresh.line_starts()


@st.composite
def _descending_batch(draw: st.DrawFn) -> tuple[str, list[TextChange], str]:
    """A text and edits as an editor sends one operation's: each ends before the one
    before it starts (the last in the text first), at positions that need no clamping."""
    text = draw(_TEXT)
    encoding = draw(st.sampled_from(ENCODINGS))
    doc = documents.Document("u", "python", 1, text)
    exact = [
        o
        for o in range(len(text) + 1)
        if doc.offset_at(*doc.position_at(o, encoding), encoding) == o
    ]
    offsets = sorted(draw(st.lists(st.sampled_from(exact), min_size=2 * 9, max_size=40)))
    if len(offsets) % 2:
        offsets.pop()
    changes = []
    for start, end in reversed(list(zip(offsets[::2], offsets[1::2], strict=True))):
        a, b = doc.position_at(start, encoding), doc.position_at(end, encoding)
        changes.append(TextChange(draw(_TEXT), Range(a[0], a[1], b[0], b[1])))
    return text, changes, encoding


@settings(max_examples=600, deadline=None)
@given(_descending_batch())
def test_an_editors_batch_is_applied_in_one_pass_as_one_by_one(batch):
    text, changes, encoding = batch
    store = DocumentStore(encoding)
    store.open("u", "python", 1, text)
    doc = store.get("u")
    assert doc is not None
    took = documents._apply_at_once(doc, changes, encoding)
    # Declined only where an edit before may join a "\n" to a "\r" (the line moves).
    assert took or "\r" in text
    if not took:
        store.change("u", 2, changes)
    assert (doc.text, doc.edited_at) == _one_by_one(text, changes, encoding)


def test_a_replace_all_on_one_long_line_copies_the_line_once():
    """VS Code's Replace All on a minified file: 2,740 edits on one 200,000-character
    line, the last first. ``_Lines`` re-split the line per edit (9 s with one
    non-ASCII character); one pass reads the text once and never splits it."""
    line = "é" + "".join(f"var_{i % 7}=f(x);" for i in range(20_000))
    store = DocumentStore()
    store.open("u", "javascript", 1, line)
    doc = store.get("u")
    assert doc is not None
    starts = [i for i in range(len(line)) if line.startswith("var_3", i)]
    changes = [TextChange("renamed", Range(0, i, 0, i + 5)) for i in reversed(starts)]
    split = documents._split_lines

    def never(t: str) -> list[str]:
        raise AssertionError("the line was split")

    documents._split_lines = never
    try:
        store.change("u", 2, changes)
    finally:
        documents._split_lines = split
    assert doc.text == line.replace("var_3", "renamed")
    assert doc.edited_at == starts[0] + len("renamed")


def test_thousands_of_edits_touch_only_their_lines():
    """3,000 edits on 100,000 lines: each re-splits two lines, never the whole text."""
    text = "".join(f"value_{i} = compute(value_{i // 2})\n" for i in range(100_000))
    store = DocumentStore()
    store.open("u", "python", 1, text)
    changes = [
        TextChange("renamed", Range(line, 0, line, len("value"))) for line in range(0, 99_000, 33)
    ]
    calls = 0
    split = documents._split_lines

    def counting(t: str) -> list[str]:
        nonlocal calls
        calls += len(t)
        return split(t)

    documents._split_lines = counting
    try:
        doc = store.change("u", 2, changes)
    finally:
        documents._split_lines = split
    assert doc.text.count("renamed_") == 3_000
    assert doc.line_starts() == documents.Document("u", "", 2, doc.text).line_starts()
    # One split of the whole text, then about two lines per edit.
    assert calls < 2 * len(text), calls


def _reference_units(ch: str, encoding: str) -> int:
    """Code units of one character, as the LSP specification counts them."""
    cp = ord(ch)
    if encoding == "utf-16":
        return 2 if cp > 0xFFFF else 1
    if encoding == "utf-8":
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 1


def test_columns_of_long_lines_convert_as_the_specification_counts() -> None:
    """UTF-16 columns are measured by the codec in pieces (a Python step per emoji cost half
    a second at the end of a line of a million): columns at and around the pieces' ends."""
    import random

    from structspec.completion.documents import _UTF16_PIECE, column_to_index, index_to_column

    rng = random.Random(11)
    for _ in range(40):
        alphabet = rng.choice([["a", "😀"], ["😀"], ["a", "\ud800", "\udc00", "😀", "é"]])
        line = "".join(
            rng.choice(alphabet) for _ in range(rng.randint(_UTF16_PIECE, 3 * _UTF16_PIECE))
        )
        units = [_reference_units(ch, "utf-16") for ch in line]
        starts = [0]
        for u in units:
            starts.append(starts[-1] + u)
        near = [k * _UTF16_PIECE + d for k in (1, 2, 3) for d in (-2, -1, 0, 1, 2)]
        picks = near + [rng.randint(0, starts[-1] + 2) for _ in range(50)] + [starts[-1] + 1]
        for column in picks:
            i = next((j for j, before in enumerate(starts) if before >= column), len(line))
            assert column_to_index(line, column, "utf-16") == (i if column > 0 else 0), column
        for index in near + [len(line)]:
            assert index_to_column(line, index, "utf-16") == starts[min(max(index, 0), len(line))]


def test_columns_and_indexes_convert_as_the_specification_counts() -> None:
    """The conversions run at C speed over the line (a Python step per character cost
    0.2 s per conversion at the end of a 1 MB minified line with one accent); they must
    count exactly as a walk of the characters does, inside pairs and sequences too."""
    import random

    from structspec.completion.documents import column_to_index, index_to_column

    rng = random.Random(7)
    alphabet = ["a", "é", "€", "😀", "\U0010fffd", "\ud800", "\udc00", "\r", "\n"]
    for _ in range(3_000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        for encoding in ("utf-16", "utf-8", "utf-32"):
            units = [_reference_units(ch, encoding) for ch in line]
            for index in range(len(line) + 2):
                expected = sum(units[:index])
                assert index_to_column(line, index, encoding) == expected
            for column in range(-1, sum(units) + 3):
                # the first character that does not start before the column
                i, before = 0, 0
                while i < len(line) and before < column:
                    before += units[i]
                    i += 1
                assert column_to_index(line, column, encoding) == (i if column > 0 else 0), (
                    line,
                    column,
                    encoding,
                )
