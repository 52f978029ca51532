"""Prompts that stay stable while the user types, so the model's KV cache is reused.

A prompt is ``header + window`` where the window is the document text before
the cursor, starting at a *cut*: a line start chosen once and kept while it
still fits. Typing appends to the end of the window, so consecutive prompts
share everything up to the edit and the model only evaluates the new tail.
When the window outgrows its budget the cut jumps forward to leave a quarter of
the budget free, so the prompt changes its start rarely instead of sliding by
one line per keystroke (a sliding start would defeat reuse on every request).

With fill-in-the-middle tokens the order is prefix, suffix, middle
(``FIM_PRE header+window FIM_SUF suffix FIM_MID``): the stable part still comes
first and only the short suffix after it is re-evaluated. Models without FIM
tokens (Gemma 3) get the prefix only.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from structspec.completion.documents import uri_path
from structspec.engine.decode import PASS_ROWS_RESERVE
from structspec.model.base import Model
from structspec.syntax.table import GrammarTableError, load_table

#: Characters per token assumed before anything is tokenized (code is ~3-4).
_CHARS_PER_TOKEN_GUESS = 4
#: Most characters ever tokenized for a window, whatever the budget (a 1 MB
#: line without breaks must not be tokenized on every keystroke).
_MAX_WINDOW_CHARS_PER_TOKEN = 12
#: Suffix tokens kept in a FIM prompt (re-evaluated on every request).
FIM_SUFFIX_TOKENS = 256


def sanitize(text: str) -> str:
    """Text safe to tokenize: no NUL characters, no lone surrogates."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _comment_leader(language: str) -> str:
    try:
        return load_table().comment_leader(language)
    except GrammarTableError:
        return ""


def header_for(uri: str, language: str) -> str:
    """A comment line naming the file, in the language's comment syntax ('' if unknown)."""
    leader = _comment_leader(language)
    if not leader:
        return ""
    path = uri_path(uri)
    name = posixpath.basename(path.rstrip("/")) or path
    name = sanitize(name).replace("\n", " ").replace("\r", " ")[:200]
    return f"{leader} Path: {name}\n" if name else ""


@dataclass(frozen=True)
class Prompt:
    """Prompt tokens and where their window lies in the document."""

    tokens: list[int]
    cut: int  # document offset where the window before the cursor starts
    offset: int  # the cursor
    suffix_end: int  # end of the suffix window (== offset without FIM)
    fim: bool


def _line_start_at_or_after(text: str, pos: int, limit: int) -> int:
    """First line start in ``[pos, limit]``; ``pos`` itself when there is none."""
    if pos <= 0:
        return 0
    if text[pos - 1] == "\n":
        return pos
    nl = text.find("\n", pos, limit)
    return nl + 1 if nl >= 0 else pos


def prompt_room(model: Model, max_tokens: int) -> int:
    """Tokens a prompt may use so that ``max_tokens`` and a pass still fit the context."""
    max_tokens = max(0, min(max_tokens, (model.n_ctx - PASS_ROWS_RESERVE) // 2))
    return max(8, model.n_ctx - max_tokens - PASS_ROWS_RESERVE - 1)


class PromptBuilder:
    """Builds prompts for one model; see the module docstring."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.fim = model.fim_tokens()
        bos = model.bos_token()
        self.bos: list[int] = [bos] if bos is not None else []

    def build(
        self,
        text: str,
        offset: int,
        *,
        uri: str = "",
        language: str = "",
        cut_hint: int | None = None,
        max_tokens: int = 128,
        room: int | None = None,
    ) -> Prompt:
        """The prompt for a cursor at ``offset`` of ``text``.

        ``cut_hint`` is the cut of this document's previous prompt: it is kept
        whenever it still fits, which is what keeps prompts stable.
        """
        offset = max(0, min(offset, len(text)))
        room = prompt_room(self.model, max_tokens) if room is None else room
        header = header_for(uri, language)
        suffix_tokens: list[int] = []
        suffix_end = offset
        if self.fim is not None:
            budget = min(FIM_SUFFIX_TOKENS, room // 4)
            suffix_tokens, suffix_end = self._suffix(text, offset, budget)
            room -= len(suffix_tokens) + 3
        cut, body = self._window(text, offset, header, max(4, room - len(self.bos)), cut_hint)
        if self.fim is not None:
            f = self.fim
            tokens = [*self.bos, f.prefix, *body, f.suffix, *suffix_tokens, f.middle]
        else:
            tokens = [*self.bos, *body]
        return Prompt(tokens, cut, offset, suffix_end, self.fim is not None)

    # -- the window before the cursor -------------------------------------
    def _tokenize(self, header: str, text: str, cut: int, offset: int) -> list[int]:
        return self.model.tokenize(header + sanitize(text[cut:offset]), add_bos=False)

    def _window(
        self, text: str, offset: int, header: str, budget: int, cut_hint: int | None
    ) -> tuple[int, list[int]]:
        max_chars = budget * _MAX_WINDOW_CHARS_PER_TOKEN
        valid_hint = (
            cut_hint is not None
            and 0 <= cut_hint <= offset
            and offset - cut_hint <= max_chars
            and (cut_hint == 0 or text[cut_hint - 1] == "\n")
        )
        if valid_hint:
            assert cut_hint is not None
            cut = cut_hint
        else:
            start = max(0, offset - budget * _CHARS_PER_TOKEN_GUESS)
            cut = _line_start_at_or_after(text, start, offset)
        tokens = self._tokenize(header, text, cut, offset)
        if valid_hint and cut > 0 and len(tokens) < budget // 2:
            # The cursor moved back up (or text was deleted): widen the window again.
            start = max(0, offset - budget * _CHARS_PER_TOKEN_GUESS)
            wider = _line_start_at_or_after(text, start, offset)
            if wider < cut:
                cut, tokens = wider, self._tokenize(header, text, wider, offset)
        for _ in range(6):
            if len(tokens) <= budget:
                return cut, tokens
            # Too long: move the cut so that about 3/4 of the budget is used,
            # leaving room to type before the next move.
            chars_per_token = max(0.25, (offset - cut) / max(1, len(tokens)))
            target = int(budget * 0.75 * chars_per_token)
            new_cut = _line_start_at_or_after(text, max(cut + 1, offset - target), offset)
            if new_cut <= cut:
                new_cut = min(offset, cut + max(1, (offset - cut) // 4))
            cut = new_cut
            tokens = self._tokenize(header, text, cut, offset)
        # Pathological text (no line breaks, odd tokenization): keep the last tokens.
        return cut, tokens[-budget:]

    # -- the suffix (FIM only) --------------------------------------------
    def _suffix(self, text: str, offset: int, budget: int) -> tuple[list[int], int]:
        if budget <= 0 or offset >= len(text):
            return [], offset
        end = min(len(text), offset + budget * _CHARS_PER_TOKEN_GUESS)
        if end < len(text):
            nl = text.rfind("\n", offset, end)
            if nl > offset:
                end = nl + 1
        tokens = self.model.tokenize(sanitize(text[offset:end]), add_bos=False)
        return tokens[:budget], end
