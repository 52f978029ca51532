"""Typing-through: serve the rest of the pending suggestion without the model.

When the user types characters that match the start of the suggestion on
screen, the rest of it is still the model's answer for the new cursor (the
prompt grew by exactly the tokens the model itself chose), so it is served from
here in microseconds. The entry is only trusted while the text around it is
unchanged: the text before the suggestion's anchor (a window of it), and the
text after the cursor.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Characters before the anchor that must be unchanged for the entry to hold.
BEFORE_WINDOW = 4000
#: Characters after the cursor that must be unchanged.
AFTER_WINDOW = 400


@dataclass(frozen=True)
class PendingSuggestion:
    """A suggestion as shown at ``anchor`` (a document offset)."""

    id: str
    anchor: int
    text: str
    before: str
    after: str

    @classmethod
    def at(cls, suggestion_id: str, doc_text: str, anchor: int, text: str) -> PendingSuggestion:
        return cls(
            suggestion_id,
            anchor,
            text,
            doc_text[max(0, anchor - BEFORE_WINDOW) : anchor],
            doc_text[anchor : anchor + AFTER_WINDOW],
        )

    def rest_at(self, doc_text: str, offset: int) -> str | None:
        """What remains to suggest at ``offset``, or ``None`` when the entry does not apply."""
        typed = offset - self.anchor
        if typed < 0 or typed >= len(self.text):
            return None
        if not self.text.startswith(doc_text[self.anchor : offset]):
            return None
        if doc_text[max(0, self.anchor - BEFORE_WINDOW) : self.anchor] != self.before:
            return None
        if doc_text[offset : offset + len(self.after)] != self.after:
            return None
        rest = self.text[typed:]
        return rest if rest.strip() else None
