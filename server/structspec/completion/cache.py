"""Typing-through and pre-generation: answers served without the model.

When the user types characters that match the start of the suggestion on
screen, the rest of it is still the model's answer for the new cursor (the
prompt grew by exactly the tokens the model itself chose), so it is served from
here in microseconds. The entry is only trusted while the text around it is
unchanged: the text before the suggestion's anchor (a window of it), and the
text after the cursor.

**Pre-generation.** Once a suggestion is shown, the service keeps the model
writing past its end while the user reads it (see ``service``). What the model
wrote from the anchor on, shown or not, is the entry's ``Continuation``: when
the user accepts the suggestion (whole, its first line, its first word) and
goes on (Enter, a next request), the typed text still follows the model's own
output, so the next suggestion is the continuation from the new cursor,
answered at once. It is greedy decoding of the same context continued: the
same tokens a request at the new cursor would start from.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, replace

#: Characters before the anchor that must be unchanged for the entry to hold.
BEFORE_WINDOW = 4000
#: Characters after the cursor that must be unchanged.
AFTER_WINDOW = 400


def decode_utf8(data: bytes) -> tuple[str, bytes]:
    """``data`` decoded, and the trailing bytes of a character not complete yet."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=False)
    return text, decoder.getstate()[0]


@dataclass(frozen=True)
class Extension:
    """Tokens the model wrote after a continuation: their output bytes, and whether it ended."""

    tokens: tuple[int, ...]
    data: bytes
    ended: bool = False


@dataclass(frozen=True)
class Continuation:
    """What the model wrote from an anchor on, and the token sequence it came from.

    ``tokens`` is the whole sequence (prompt and output) whose output decodes
    to ``text`` (plus ``partial``, the bytes of a character split between two
    tokens): pre-generation continues from it. ``ended``: the model ended it
    (end of generation), nothing follows. ``sees_rest``: its prompt held the
    text after the anchor (``suggest.clean``).
    """

    text: str
    tokens: tuple[int, ...]
    partial: bytes = b""
    ended: bool = False
    sees_rest: bool = True

    def extended(self, ext: Extension) -> Continuation:
        """This continuation followed by what the model wrote next."""
        more, partial = decode_utf8(self.partial + ext.data)
        return replace(
            self,
            text=self.text + more,
            tokens=self.tokens + ext.tokens,
            partial=partial,
            ended=ext.ended or self.ended,
        )

    def after(self, start: int) -> Continuation:
        """The same output from character ``start`` of ``text`` on."""
        return replace(self, text=self.text[start:])

    def lines_after(self, start: int) -> int:
        """Complete lines (line breaks) of ``text`` after character ``start``."""
        return self.text.count("\n", start)


@dataclass(frozen=True)
class PendingSuggestion:
    """A suggestion as shown at ``anchor`` (a document offset).

    ``continuation``, when set, is the model's own output from the anchor:
    ``text`` is its cleaned first part (usually a prefix of it), or empty when
    the model's answer there was to show nothing.
    """

    id: str
    anchor: int
    text: str
    before: str
    after: str
    continuation: Continuation | None = None

    @classmethod
    def at(
        cls,
        suggestion_id: str,
        doc_text: str,
        anchor: int,
        text: str,
        continuation: Continuation | None = None,
    ) -> PendingSuggestion:
        return cls(
            suggestion_id,
            anchor,
            text,
            doc_text[max(0, anchor - BEFORE_WINDOW) : anchor],
            doc_text[anchor : anchor + AFTER_WINDOW],
            continuation,
        )

    def _holds(self, doc_text: str, offset: int, typed_text: str) -> bool:
        """The text around the entry is unchanged and ``typed_text`` was typed at the anchor."""
        return (
            doc_text[self.anchor : offset] == typed_text
            and doc_text[max(0, self.anchor - BEFORE_WINDOW) : self.anchor] == self.before
            and doc_text[offset : offset + len(self.after)] == self.after
        )

    def rest_at(self, doc_text: str, offset: int) -> str | None:
        """What remains to suggest at ``offset``, or ``None`` when the entry does not apply."""
        typed = offset - self.anchor
        if typed < 0 or typed >= len(self.text):
            return None
        if not self._holds(doc_text, offset, self.text[:typed]):
            return None
        rest = self.text[typed:]
        return rest if rest.strip() else None

    def continuation_at(self, doc_text: str, offset: int) -> str | None:
        """The model's output from ``offset`` on, when the user typed what the model wrote.

        ``None`` when there is no continuation or the typed text left it. (Within
        the shown text the request flow answers with ``rest_at``, what is on
        screen, unless the model's output from there goes on past it.)
        """
        cont = self.continuation
        typed = offset - self.anchor
        if cont is None or typed < 0 or typed > len(cont.text):
            return None
        if not self._holds(doc_text, offset, cont.text[:typed]):
            return None
        return cont.text[typed:]

    def with_continuation(self, continuation: Continuation) -> PendingSuggestion:
        return replace(self, continuation=continuation)
