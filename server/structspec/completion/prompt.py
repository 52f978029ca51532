"""Prompts that stay stable while the user types, so the model's KV cache is reused.

A prompt is ``header + window`` where the window is the document text before
the cursor, starting at a *cut*: a line start chosen once and kept while it
still fits. Typing appends to the end of the window, so consecutive prompts
share everything up to the edit and the model only evaluates the new tail.
When the window outgrows its budget the cut jumps forward to leave a quarter of
the budget free, so the prompt changes its start rarely instead of sliding by
one line per keystroke (a sliding start would defeat reuse on every request).

The window policy: the budget is ``windowTokens``, but at a new place (a
window no KV slot holds) the first answer comes from a *first window*, what
the machine evaluates within a quarter of a second at its measured prompt rate
(``first_window``, at least ``FIRST_WINDOW_MIN``), and never more than it
evaluates in 2 s (``rates.first_window_cap``, whatever ``windowTokens`` says);
pre-warm grows it to the full window at that place while the user reads, and
the kept cut moves there once it is cached (``choose_window``, ``grows``).
A document whose text from its start a KV slot holds past the cursor (pre-warm
evaluates it, as far as the context holds: ``top_tokens``) gives the cursor
that text as its window, wider than ``windowTokens``: only the cursor's line
and the suffix are evaluated at a jump there (the model's slot is copied, not
cut, ``model.llama.FORK_MIN``).

With fill-in-the-middle tokens the order is prefix, suffix, middle, and the
cursor's line before the cursor goes after the middle token (``FIM_PRE
header+window FIM_SUF suffix FIM_MID line``, after BOS when the vocabulary
adds one; llama.cpp's ``/infill`` takes the same layout, its ``prompt`` after
the middle token, which llama.vim fills with the line before the cursor). The
window ends at the cursor's line start, so typing on a line appends to the
prompt's end and a keystroke evaluates only its own tokens; the suffix
(``suffix_budget``) and the FIM tokens are evaluated again once per line, when
the window's end moves. A line before the cursor of more than half the window
(a minified file) stays in the window instead (``LINE_SHARE``), the cursor then
before the suffix. The suffix and the line are tokenized as continuations: a
SentencePiece vocabulary's dummy leading space (CodeLlama's ``<PRE> prefix
<SUF>suffix <MID>``) goes before the prefix only. Models without FIM tokens
(Gemma 3) get the prefix only.

Project context (snippets of other files, see ``snippets``) goes before the
window. With repo-level tokens in the vocabulary it is laid out as the model
was trained (Qwen2.5-Coder: ``<|repo_name|>name\n<|file_sep|>path\ntext\n ...
<|file_sep|>current\n<|fim_prefix|>...``; StarCoder2: ``<repo_name>name
<file_sep>path\ntext ... <file_sep><fim_prefix>current\n...``); otherwise each
snippet is a comment block in the file's language, before the path header.
llama.cpp finds FIM tokens from GGUF metadata or by their text, but does not
take StarCoder2's ``<repo_name>``/``<file_sep>`` for repo-level tokens: those
are looked up here by their text (``repo_tokens``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from structspec.completion.documents import uri_path
from structspec.completion.prewarm import PromptRate, restorable_prefix, reusable_prefix
from structspec.completion.snippets import Snippet
from structspec.engine.decode import PASS_ROWS_RESERVE
from structspec.model.base import FimTokens, Model
from structspec.model.extras import contended
from structspec.rates import first_window_cap
from structspec.syntax.table import GrammarTableError, load_table

#: Characters per token assumed before anything is tokenized (code is ~3-4).
_CHARS_PER_TOKEN_GUESS = 4
#: Most characters ever tokenized for a window, whatever the budget (a 1 MB
#: line without breaks must not be tokenized on every keystroke).
_MAX_WINDOW_CHARS_PER_TOKEN = 12
#: Stride of the stable window starts inside a line without breaks (see ``_is_anchor``).
ANCHOR_CHARS = 1024
#: A kept cut whose window has fallen below ``1 / WIDEN_BELOW`` of the budget
#: (the cursor moved back up) is moved back to widen it. A first window
#: (``first_window``) may hold less; ``choose_window`` keeps it while it is
#: what the KV cache holds, and pre-warm grows it.
WIDEN_BELOW = 4
#: Seconds the prompt evaluation of a first answer at a new place should take.
FIRST_ANSWER_S = 0.25
#: Smallest window budget of a first answer at a new place (quality): on the
#: infill suite's real files a 512-token window completed lines as well as
#: 1,536 with the default model (``docs/MEASUREMENTS.md`` §5, ``--windows``).
FIRST_WINDOW_MIN = 512
#: Tokens left to evaluate of a kept window that the user is typing on (a key, a
#: short paste): no other window is tokenized to compare with it.
TYPED_ON = 8
#: A prompt whose tokens before the cursor are fewer than this share of the
#: full one's at the same place is grown by pre-warm. A window kept while
#: typing holds about 3/4 to all of its budget (its cut moves forward to leave a
#: quarter free), so it is not grown; a first window capped by the prompt rate
#: (``rates.first_window_cap``) on a model below 64 prompt tokens/s holds 2 s
#: of it against the 128-token floor of the window in effect: 85 of 128 tokens
#: at 43 tokens/s (Qwen2.5-Coder-7B on 2 cores) is grown.
GROW_BELOW = 0.7
#: Seconds of evaluation a document's pre-warm from its start may take past its
#: window (``top_tokens``): every cursor in that text shares it as a prefix.
#: On 2 cores the default model evaluates a whole 4,096-token context within
#: it (5 s with AVX-512, 10-14 s with AVX2: ``docs/MEASUREMENTS.md`` §5,
#: §12); a 1.5B-7B model only its window (``windowTokens``).
TOP_S = 15.0
#: Suffix tokens kept in a FIM prompt, at most (evaluated again on each new line).
FIM_SUFFIX_TOKENS = 256
#: Seconds of a keystroke's answer the suffix's evaluation may take: a new
#: line moves the window's end, so its first request evaluates the suffix again. At
#: the measured prompt rate (``suffix_budget``): 16 tokens on a 1.5B model on 2
#: cores (163 tokens/s), 256 from 2,560 tokens/s.
SUFFIX_S = 0.1
#: Fewest suffix tokens kept (about a line), whatever the rate.
SUFFIX_MIN = 16
#: Most of the window budget the cursor's line before the cursor may take after
#: the FIM middle token; a longer one stays in the window.
LINE_SHARE = 0.5
#: Most tokens of project context before the window (and at most a third of the
#: room and of the window's budget: a first window's prompt stays small).
CONTEXT_TOKENS = 512
#: Repo-level token spellings: (repo name, file separator, family).
_REPO_SPELLINGS = (
    ("<|repo_name|>", "<|file_sep|>", "qwen"),
    ("<repo_name>", "<file_sep>", "starcoder"),
)


def sanitize(text: str) -> str:
    """Text safe to tokenize: no NUL characters, no lone surrogates."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def comment_leader(language: str) -> str:
    """The line-comment leader of an LSP languageId ('' if unknown)."""
    try:
        return load_table().comment_leader(language)
    except GrammarTableError:
        return ""


def file_name(uri: str) -> str:
    """The file name of ``uri``, safe for a one-line header ('' if none)."""
    path = uri_path(uri)
    name = posixpath.basename(path.rstrip("/")) or path
    return sanitize(name).replace("\n", " ").replace("\r", " ")[:200]


def header_for(uri: str, language: str) -> str:
    """A comment line naming the file, in the language's comment syntax ('' if unknown)."""
    leader = comment_leader(language)
    name = file_name(uri)
    return f"{leader} Path: {name}\n" if leader and name else ""


def snippet_comment(snippet: Snippet, leader: str) -> str:
    """A snippet as a comment block (Copilot's neighbour-snippet form)."""
    lines = sanitize(snippet.text).split("\n")
    body = "".join(f"{leader} {line}".rstrip() + "\n" for line in lines)
    return f"{leader} Compare this snippet from {snippet.path}:\n{body}"


def has_space_prefix(model: Model) -> bool:
    """The vocabulary puts a dummy space before every tokenized text (SentencePiece)."""
    return model.detokenize(model.tokenize("a", add_bos=False)) == " a"


def continuation_tokens(model: Model, text: str, space_prefix: bool | None = None) -> list[int]:
    """Tokens of ``text`` continuing earlier text: no dummy leading space (SentencePiece).

    ``space_prefix``: ``has_space_prefix(model)``, when the caller knows it.
    """
    tokenize = model.tokenize
    if not (has_space_prefix(model) if space_prefix is None else space_prefix):
        return tokenize(text, add_bos=False)
    # Tokenize behind a newline (which no piece merges across) and drop it.
    lead = tokenize("\n", add_bos=False)
    tokens = tokenize("\n" + text, add_bos=False)
    if tokens[: len(lead)] == lead:
        return tokens[len(lead) :]
    tokens = tokenize(text, add_bos=False)
    if tokens and model.token_bytes(tokens[0]) == b" ":
        tokens = tokens[1:]
    return tokens


def fim_text_tokens(model: Model, fim: FimTokens, before: str, after: str) -> list[int]:
    """A FIM prompt of whole texts (an API request's prompt and suffix), laid out as ``build``.

    ``BOS FIM_PRE before-to-its-last-line FIM_SUF after FIM_MID last-line``: a
    client that sends the text again with a character more shares all but its
    last tokens with the KV cache.
    """
    space = has_space_prefix(model)
    start = before.rfind("\n") + 1
    bos = model.bos_token()
    return fim_order(
        fim,
        [bos] if bos is not None else [],
        model.tokenize(before[:start], add_bos=False),
        continuation_tokens(model, after, space),
        continuation_tokens(model, before[start:], space),
    )


def fim_order(
    fim: FimTokens,
    head: Sequence[int],
    window: Sequence[int],
    suffix: Sequence[int],
    line: Sequence[int],
) -> list[int]:
    """The FIM layout (module docstring): ``head FIM_PRE window FIM_SUF suffix FIM_MID line``."""
    return [*head, fim.prefix, *window, fim.suffix, *suffix, fim.middle, *line]


@dataclass(frozen=True)
class RepoTokens:
    """Repo-level special tokens of a vocabulary, and whose layout they follow."""

    repo_name: int
    file_sep: int
    family: str  # "qwen" or "starcoder"


def _special_token(model: Model, text: str) -> int | None:
    """The id of the control token spelled ``text``, if the vocabulary has one."""
    try:
        ids = model.tokenize(text, add_bos=False, special=True)  # type: ignore[call-arg]
    except TypeError:  # a model without special-token parsing (the stand-in)
        return None
    if len(ids) == 1 and len(model.tokenize(text, add_bos=False)) > 1:
        return ids[0]
    return None


def repo_tokens(model: Model) -> RepoTokens | None:
    """The vocabulary's repo-level tokens (Qwen2.5-Coder or StarCoder2 spelling)."""
    for repo, sep, family in _REPO_SPELLINGS:
        repo_id, sep_id = _special_token(model, repo), _special_token(model, sep)
        if repo_id is not None and sep_id is not None:
            return RepoTokens(repo_id, sep_id, family)
    return None


@dataclass(frozen=True)
class Prompt:
    """Prompt tokens and where their window lies in the document."""

    tokens: list[int]
    cut: int  # document offset where the window before the cursor starts
    offset: int  # the cursor
    suffix_end: int  # end of the suffix window (== offset without FIM)
    fim: bool
    context: int = 0  # project-context tokens before the window (repo-level layout)
    suffix: int = 0  # tokens between the window and the line: the FIM suffix and FIM tokens
    line: int = 0  # tokens of the cursor's line after the FIM middle token (the prompt's end)

    @property
    def before_cursor(self) -> int:
        """Tokens of the prompt before the cursor (all but the FIM suffix part)."""
        return len(self.tokens) - self.suffix

    @property
    def insert_at(self) -> int:
        """Where token healing acts: the cursor's place in ``tokens``.

        The end, unless a FIM prompt has no line after its middle token (the
        cursor's line stayed in the window, or the cursor is at a line start):
        then its window ends at the cursor, before the suffix.
        """
        if self.fim and not self.line:
            return len(self.tokens) - self.suffix
        return len(self.tokens)


def _line_start_at_or_after(text: str, pos: int, limit: int) -> int:
    """First line start in ``[pos, limit]``, else the first anchor there (else ``limit``).

    Anchors (multiples of ``ANCHOR_CHARS``) are where a window starts inside a
    line with no break in reach (a minified file, a 1 MB single line): the same
    anchor is found again on the next keystroke, so the prompt keeps its start.
    """
    if pos <= 0:
        return 0
    if text[pos - 1] == "\n":
        return pos
    nl = text.find("\n", pos, limit)
    if nl >= 0:
        return nl + 1
    return min(limit, -(-pos // ANCHOR_CHARS) * ANCHOR_CHARS)


def _is_anchor(text: str, pos: int) -> bool:
    return pos == 0 or text[pos - 1] == "\n" or pos % ANCHOR_CHARS == 0


def prompt_room(model: Model, max_tokens: int) -> int:
    """Tokens a prompt may use so that ``max_tokens`` and a pass still fit the context."""
    max_tokens = max(0, min(max_tokens, (model.n_ctx - PASS_ROWS_RESERVE) // 2))
    return max(8, model.n_ctx - max_tokens - PASS_ROWS_RESERVE - 1)


def window_budget(room: int, window_tokens: int) -> int:
    """Tokens the window before the cursor may use: ``room``, capped by ``window_tokens`` (> 0)."""
    return min(room, window_tokens) if window_tokens > 0 else room


def suffix_budget(tokens_per_s: float) -> int:
    """FIM suffix tokens a request evaluates within ``SUFFIX_S`` at ``tokens_per_s``.

    Between ``SUFFIX_MIN`` and ``FIM_SUFFIX_TOKENS``.
    """
    return max(SUFFIX_MIN, min(FIM_SUFFIX_TOKENS, int(tokens_per_s * SUFFIX_S)))


def first_window_tokens(tokens_per_s: float, budget: int) -> int:
    """What a first answer's window holds at ``tokens_per_s``, of ``budget`` (``first_window``).

    ``tokens_per_s`` times ``FIRST_ANSWER_S``, at least ``FIRST_WINDOW_MIN``;
    at most ``budget`` and at most what is evaluated in 2 s
    (``rates.first_window_cap``), which wins over the floor on a model below
    256 prompt tokens/s.
    """
    wanted = max(FIRST_WINDOW_MIN, int(tokens_per_s * FIRST_ANSWER_S))
    return max(1, min(budget, wanted, first_window_cap(tokens_per_s)))


def top_tokens(tokens_per_s: float, room: int, budget: int) -> int:
    """Tokens of a document from its start that pre-warm evaluates (``TOP_S``).

    What ``tokens_per_s`` evaluates in ``TOP_S``, at least the window
    ``budget`` and at most the prompt's ``room`` (``prompt_room``).
    """
    return max(budget, min(room, int(tokens_per_s * TOP_S)))


def first_window(model: Model, rate: PromptRate, max_tokens: int, window_tokens: int) -> int:
    """The window budget of a first answer at a new place (a window no KV slot holds).

    What the user waits for there is the window's evaluation: ``W`` tokens
    at ``R`` tokens/s take ``W / R`` seconds, so the window that is evaluated
    within the target ``T`` (``FIRST_ANSWER_S``) is ``W = R * T``. ``R`` is
    the median rate of the latest prefill chunks (``rate``), halved while
    other processes hold the cores (the thread governor runs the model on
    fewer threads; a chunk is then 2-3 times slower, ``docs/MEASUREMENTS.md``
    §4, and the median still holds quiet chunks). ``W`` is at least
    ``FIRST_WINDOW_MIN`` (quality) and at most the full budget
    (``windowTokens``, the cap). On 2 cores the default model evaluates about
    450-960 tokens/s: ``R * T`` is 110-240 tokens, so the floor decides, and
    a new place waits for 512 tokens instead of 1,536; a machine evaluating
    more than 2,048 tokens/s gets a wider first window. Whatever
    ``windowTokens`` says, ``W`` is at most what ``R`` evaluates in 2 s
    (``rates.first_window_cap``): on a 1.5B-7B model (43-250 tokens/s on 2
    cores) that wins over the floor, and a new place still answers within
    about 2 s. The FIM suffix comes on top (``suffix_budget``).
    """
    budget = window_budget(prompt_room(model, max_tokens), window_tokens)
    tokens_per_s = rate.tokens_per_s / (2 if contended(model) else 1)
    return first_window_tokens(tokens_per_s, budget)


def to_evaluate(model: Model, prompt: Prompt) -> int:
    """Tokens of ``prompt`` that no KV slot holds and the on-disk prefix cache cannot restore."""
    held = prompt.tokens[:-1]
    return len(prompt.tokens) - max(reusable_prefix(model, held), restorable_prefix(model, held))


def choose_window(
    model: Model,
    build: Callable[[int, int | None], Prompt],
    cut_hint: int | None,
    window_tokens: int,
    first: int,
) -> Prompt:
    """The window policy: the full window where it is cached, a first window at a new place.

    ``build(window_tokens, cut_hint)`` builds a prompt (``window_tokens`` 0:
    as much as the context holds). The document from its start
    (``build(0, 0)``, the *top*) is taken when the kept cut is its start and
    it leaves at most ``TYPED_ON`` tokens to evaluate: the user is typing on
    where it is cached; so is the full window at the kept cut. When the full
    window leaves no more than a first window (``first``, from
    ``first_window``) and no cut was kept, it is taken. Else the one that
    leaves the fewest tokens to evaluate answers (the wider on a tie) of: the
    top (cached where pre-warm evaluated the document from its start: a jump,
    without a cursor report, to anywhere in it), the full window at the kept
    cut, the full window from a fresh cut (what pre-warm evaluated at a place
    the user comes back to), and at a new place (the full window leaves more
    than a first one) the first window from a fresh cut, whatever cut was
    kept: the same window as for a user who came without one. Pre-warm then
    grows a first window to the full one while the user reads (``grows``),
    and the kept cut moves to it once it is cached.
    """
    top = build(0, 0) if cut_hint == 0 else None
    if top is not None and to_evaluate(model, top) <= TYPED_ON:
        return top  # (a window at a moved cut may be cached too, but holds less)
    prompt = build(window_tokens, cut_hint)
    left = to_evaluate(model, prompt)
    if left <= TYPED_ON or (left <= first and cut_hint is None):
        return prompt
    if top is None:
        top = build(0, 0)
    candidates = [top, prompt]
    if cut_hint is not None:
        candidates.append(build(window_tokens, None))
    if left > first:
        # From a fresh cut: a kept cut from another place would move the first
        # window's start by what lies between, so the answer here would depend
        # on how the user came. From the kept cut it is cached no more than
        # ``prompt`` is.
        candidates.append(build(first, None))
    return min(candidates, key=lambda p: to_evaluate(model, p))


def grows(prompt: Prompt, full: Prompt) -> bool:
    """``prompt`` is a first answer's prompt that the ``full`` one at its place widens.

    Wider: a window that starts no later and a good deal more tokens before
    the cursor (``GROW_BELOW``; a first window also holds less project
    context). The FIM suffix, the same in both, is not counted: it would hide
    a short first window's shortfall.
    """
    return full.cut <= prompt.cut and prompt.before_cursor < full.before_cursor * GROW_BELOW


class PromptBuilder:
    """Builds prompts for one model; see the module docstring."""

    def __init__(self, model: Model, prompt_tps: float | None = None) -> None:
        """``prompt_tps``: the model's prompt rate measured at load (``PromptRate``)."""
        self.model = model
        self.fim = model.fim_tokens()
        bos = model.bos_token()
        self.bos: list[int] = [bos] if bos is not None else []
        self.repo = repo_tokens(model) if self.fim is not None else None
        self._space_prefix = has_space_prefix(model)
        self._context_cache: tuple[tuple[object, ...], tuple[list[int], str]] | None = None
        #: Prompt tokens/s of this model's latest prefill chunks (``first_window``,
        #: ``suffix_budget``).
        self.rate = PromptRate(prompt_tps)

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
        window_tokens: int = 0,
        context: Sequence[Snippet] = (),
    ) -> Prompt:
        """The prompt for a cursor at ``offset`` of ``text``.

        ``cut_hint`` is the cut of this document's previous prompt: it is kept
        whenever it still fits, which is what keeps prompts stable.
        ``window_tokens`` (> 0) caps the window: the prefill a cursor in a
        new place costs, which pre-warming must finish while the user reads.
        ``context``: snippets of other files to place before the window.
        """
        offset = max(0, min(offset, len(text)))
        room = prompt_room(self.model, max_tokens) if room is None else room
        suffix_tokens: list[int] = []
        suffix_end = offset
        if self.fim is not None:
            most = suffix_budget(self.rate.tokens_per_s) if self.rate.known else None
            budget = min(most or FIM_SUFFIX_TOKENS, room // 4)
            suffix_tokens, suffix_end = self._suffix(text, offset, budget)
            room -= len(suffix_tokens) + 3
        most = min(CONTEXT_TOKENS, room // 3, window_budget(room, window_tokens) // 3)
        lead, header = self._context(uri, language, context, most)
        room -= len(lead)
        budget = window_budget(max(4, room - len(self.bos)), window_tokens)
        if self.fim is None:
            cut, body = self._window(text, offset, header, budget, cut_hint)
            return Prompt([*self.bos, *lead, *body], cut, offset, offset, False, len(lead))
        end, line = self._line(text, offset, budget)
        cut, body = self._window(text, end, header, budget - len(line), cut_hint)
        tokens = fim_order(self.fim, [*self.bos, *lead], body, suffix_tokens, line)
        after = len(suffix_tokens) + 2
        return Prompt(tokens, cut, offset, suffix_end, True, len(lead), after, len(line))

    # -- project context ----------------------------------------------------
    def _context(
        self, uri: str, language: str, snippets: Sequence[Snippet], budget: int
    ) -> tuple[list[int], str]:
        """Tokens before the prefix and the header text before the window.

        Snippets that do not fit ``budget`` (best first) are left out. The last
        result is kept: the same snippets give the very same tokens.
        """
        key = (uri, language, budget, tuple(snippets))
        if self._context_cache is not None and self._context_cache[0] == key:
            return self._context_cache[1]
        result = self._layout_context(uri, language, snippets, budget)
        self._context_cache = (key, result)
        return result

    def _layout_context(
        self, uri: str, language: str, snippets: Sequence[Snippet], budget: int
    ) -> tuple[list[int], str]:
        header = header_for(uri, language)
        if not snippets:
            return [], header
        tok = self.model.tokenize
        repo = self.repo
        if repo is None:
            leader = comment_leader(language)
            if not leader:
                return [], header
            blocks = ""
            used = len(tok(header, add_bos=False))
            for snippet in snippets:
                block = snippet_comment(snippet, leader)
                n = len(tok(block, add_bos=False))
                if used + n <= budget:
                    blocks, used = blocks + block, used + n
            return [], blocks + header
        name = file_name(uri) or "untitled"
        parent = posixpath.basename(posixpath.dirname(uri_path(uri)).rstrip("/"))
        project = sanitize(parent).replace("\n", " ")[:100] or "project"
        # Qwen2.5-Coder ends the repo name with a newline; StarCoder2 does not.
        newline = "\n" if repo.family == "qwen" else ""
        lead = [repo.repo_name, *tok(project + newline, add_bos=False)]
        fitted = 0
        for snippet in snippets:
            text = f"{snippet.path}\n{sanitize(snippet.text)}\n"
            piece = [repo.file_sep, *tok(text, add_bos=False)]
            if len(lead) + len(piece) + 1 <= budget:
                lead += piece
                fitted += 1
        if not fitted:
            return [], header  # nothing fitted: the plain layout
        if repo.family == "qwen":
            return [*lead, repo.file_sep, *tok(f"{name}\n", add_bos=False)], ""
        # StarCoder2: the current file's path follows <fim_prefix>.
        return [*lead, repo.file_sep], f"{name}\n"

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
            and _is_anchor(text, cut_hint)
        )
        if valid_hint:
            assert cut_hint is not None
            cut = cut_hint
        else:
            start = max(0, offset - budget * _CHARS_PER_TOKEN_GUESS)
            cut = _line_start_at_or_after(text, start, offset)
        tokens = self._tokenize(header, text, cut, offset)
        if valid_hint and cut > 0 and len(tokens) < budget // WIDEN_BELOW:
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
            if new_cut >= offset:
                break  # no anchor left before the cursor: keep the last tokens
            cut = new_cut
            tokens = self._tokenize(header, text, cut, offset)
        # Pathological text (no line breaks, odd tokenization): keep the last tokens.
        return cut, tokens[-budget:]

    # -- the line before the cursor and the suffix (FIM only) --------------
    def _line(self, text: str, offset: int, budget: int) -> tuple[int, list[int]]:
        """Where the window ends and the tokens after the FIM middle token.

        The window ends at the cursor's line start (or at the anchor before the
        cursor in a line without breaks, see ``_is_anchor``), and the line's
        text up to the cursor follows the middle token. A line of more than
        ``LINE_SHARE`` of ``budget`` stays in the window: ``(offset, [])``.
        """
        start = max(text.rfind("\n", 0, offset) + 1, offset - offset % ANCHOR_CHARS)
        if start >= offset:
            return offset, []
        tokens = self._continuation(sanitize(text[start:offset]))
        if len(tokens) > budget * LINE_SHARE:
            return offset, []
        return start, tokens

    def _suffix(self, text: str, offset: int, budget: int) -> tuple[list[int], int]:
        if budget <= 0 or offset >= len(text):
            return [], offset
        end = min(len(text), offset + budget * _CHARS_PER_TOKEN_GUESS)
        if end < len(text):
            nl = text.rfind("\n", offset, end)
            if nl > offset:
                end = nl + 1
        tokens = self._continuation(sanitize(text[offset:end]))
        return tokens[:budget], end

    def _continuation(self, text: str) -> list[int]:
        return continuation_tokens(self.model, text, self._space_prefix)
