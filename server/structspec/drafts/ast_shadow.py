"""The syntax-tree shadow as a draft source: syntax that code makes (nearly) certain.

The source shadows the text around the cursor plus everything generated so
far with two views, both updated incrementally as tokens arrive:

- a lexical state (``structspec.syntax.lexer``): bracket stack, string and
  comment state, the current line and its indentation, the buffer's own
  indentation unit, JSON expectations, the HTML element stack;
- a tree-sitter tree (``structspec.syntax.shadow``), edited and reparsed
  incrementally, queried with ``grammars/<lang>/shadow.scm``.

From the lexical state it proposes the mandatory closures and transitions of
the language (the table's ``block_style`` and friends decide which apply).
The draft's tier is the rule's name:

- ``block``: after a line ending in ``:`` (Python) or ``{``, newline + indent;
- ``header-kw``: a bare block keyword (``else``, ``try``) gets ``:`` or `` {``,
  newline and indent; ``header`` (brace languages): after the closing bracket
  of a header (``if (x > 0)``, ``func main()``), `` {`` + newline + indent;
- ``close-word`` (Python): the brackets opened on the current line and a newline;
- ``indent``: after a newline, the indentation the previous line implies;
- JSON: ``key-end`` (``": "``), ``value-end``/``next`` (``,`` + newline + indent
  + ``"``), ``open``, ``colon``; and from the structure of the sibling objects
  (suffix ``+k``, and ``key-rest``/``value-rest``/``value``): the rest of a key
  or value being typed, the key that followed this one before, and a value that
  repeated (``"type": "string"``);
- HTML: ``end-tag`` (after ``</``), ``close-inline`` (``</code>`` after one word
  of content), ``open`` (after the start tag of a block element);
- ``kw``: keyword continuations of the table (SQL ``ORDER`` -> `` BY``, Go
  ``if err`` -> `` != nil {``).

Rules the model follows too rarely to pay for a verification row on a CPU
(measured on gemma-3-270m output: ``header-cond`` ``if x > 0`` -> ``:``,
``header-close``, ``close`` in brace languages) are proposed only with
``all_tiers=True``. ``TierGate`` mutes, at run time, any tier the model keeps
rejecting; ``PRIORS`` are the measured acceptances a planner starts from.

Before a proposal is returned, the tree must agree: no draft inside a string
or comment (``@skip``), and none when an ERROR node sits in finished code just
before the statement being typed (the state is then not to be trusted).

Proposals are text; they become token ids by tokenizing them *after the
pending token's text* so that merges across the boundary match what the
model itself would emit (Gemma writes ``):`` and ``":`` as single tokens).
"""

from __future__ import annotations

import codecs
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from structspec.drafts.ast_code import code_candidate
from structspec.drafts.ast_html import html_candidate
from structspec.drafts.ast_json import json_candidate
from structspec.drafts.base import Draft, DraftContext, TimedPropose
from structspec.drafts.feedback import TierGate
from structspec.model.base import Model

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions
from structspec.syntax.lexer import LexState
from structspec.syntax.shadow import ShadowTree
from structspec.syntax.table import GrammarTableError, LanguageSpec, LanguageTable, load_table

#: Bytes of text before the cursor that are shadowed (lexed and parsed).
WINDOW_BYTES = 4000
#: Acceptance priors per tier (first drafted token followed by the model), measured
#: offline on gemma-3-270m greedy output for 18 mixed-language and 24 HumanEval
#: prompts; the planner starts from them (``ASTShadowSource.priors``).
PRIORS: dict[str, float] = {
    "ast": 0.7,
    "ast:block": 0.95,
    "ast:open": 0.9,
    "ast:key-end": 0.95,
    "ast:key-rest": 0.95,
    "ast:value": 0.9,
    "ast:value-end": 0.8,
    "ast:value-rest": 0.9,
    "ast:value-end+k": 0.9,
    "ast:value-rest+k": 0.9,
    "ast:next+k": 0.9,
    "ast:indent+k": 0.9,
    "ast:open+k": 0.9,
    "ast:colon": 0.8,
    "ast:next": 0.5,
    "ast:indent": 0.75,
    "ast:end-tag": 0.9,
    "ast:close-inline": 0.6,
    "ast:kw": 0.7,
    "ast:header-kw": 0.7,
    "ast:header": 0.5,
    "ast:close-word": 0.6,
}


class ASTShadowSource(TimedPropose):
    """The syntax-tree shadow draft source; see the module docstring."""

    name = "ast"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> ASTShadowSource:
        """The registry's constructor (``structspec.drafts.registry``)."""
        return cls(model)

    def __init__(
        self,
        model: Model,
        *,
        table: LanguageTable | None = None,
        window_bytes: int = WINDOW_BYTES,
        all_tiers: bool = False,
    ) -> None:
        self.model = model
        self.window_bytes = window_bytes
        #: Also propose the low-precision rules (see the module docstring).
        self.all_tiers = all_tiers
        self.gate = TierGate()
        self._table: LanguageTable | None
        try:
            self._table = table or load_table()
        except GrammarTableError as exc:  # no table: the source stays silent
            warnings.warn(f"ast source disabled: {exc}", stacklevel=2)
            self._table = None
        self._key: tuple[int, int] | None = None
        self._seen = 0
        self._lex: LexState | None = None
        self._tree: ShadowTree | None = None
        self._trees: dict[str, ShadowTree | None] = {}
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._token_cache: dict[tuple[int, str], tuple[int, ...]] = {}
        self._skip_tokens: set[int] = set()
        bos = model.bos_token()
        if bos is not None:
            self._skip_tokens.add(bos)
        self.state: str = ""  # why the last call proposed nothing (for tests and traces)

    # -- state ---------------------------------------------------------------
    def _bytes(self, tokens: Sequence[int]) -> bytes:
        tb = self.model.token_bytes
        skip = self._skip_tokens
        return b"".join(tb(t) for t in tokens if t not in skip)

    def _reset(self, ctx: DraftContext) -> None:
        toks = ctx.tokens
        # Walk back to about window_bytes of text.
        chunks: list[bytes] = []
        size, i = 0, len(toks)
        while i > 0 and size < self.window_bytes:
            i -= 1
            if toks[i] in self._skip_tokens:
                continue
            b = self.model.token_bytes(toks[i])
            chunks.append(b)
            size += len(b)
        data = b"".join(reversed(chunks))
        cut = i > 0
        if cut:
            # Cut at a line start, preferably an unindented one, so the parse starts clean.
            at = -1
            for j in range(len(data) - 1):
                if data[j] == 10 and data[j + 1] not in b" \t\n":
                    at = j + 1
                    break
            if at < 0:
                at = data.find(b"\n") + 1
            data = data[at:]
        lang: LanguageSpec | None = ctx.language_spec()
        self._key = (ctx.generation, id(toks))
        self._seen = len(toks)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        if lang is None:
            self._lex, self._tree = None, None
            return
        self._lex = LexState(lang)
        self._lex.feed(self._decoder.decode(data))
        self._tree = self._tree_for(lang)
        if self._tree is not None:
            self._tree.reset(data, cut=cut)

    def _tree_for(self, lang: LanguageSpec) -> ShadowTree | None:
        """The language's shadow tree, made once (its grammar loaded, its queries compiled)."""
        if lang.name not in self._trees:
            try:
                self._trees[lang.name] = ShadowTree(lang) if lang.grammar() is not None else None
            except Exception as exc:  # a broken query file: lexical state only
                warnings.warn(f"ast source: no parse for {lang.name}: {exc}", stacklevel=2)
                self._trees[lang.name] = None
        return self._trees[lang.name]

    def prepare(self, ctx: DraftContext, stop: Callable[[], bool]) -> None:
        """Idle time: load the buffer language's grammar and compile its queries (tens of ms)."""
        lang = ctx.language_spec()
        if lang is not None and self._table is not None and not stop():
            self._tree_for(lang)

    def _sync(self, ctx: DraftContext) -> None:
        toks = ctx.tokens
        if self._key != (ctx.generation, id(toks)) or len(toks) < self._seen:
            self._reset(ctx)
            return
        if len(toks) > self._seen:
            new = self._bytes(toks[self._seen :])
            self._seen = len(toks)
            if self._lex is not None:
                self._lex.feed(self._decoder.decode(new))
            if self._tree is not None:
                self._tree.append(new)

    # -- proposing -----------------------------------------------------------
    def _propose(self, ctx: DraftContext) -> Draft | None:
        if self._table is None or ctx.max_tokens <= 0 or len(ctx.tokens) < 1:
            return None
        self._sync(ctx)
        lex = self._lex
        if lex is None:
            self.state = "off"
            return None
        cand = self.candidate()
        if cand is None:
            self.state = "none"
            return None
        text, tier = cand
        if not self.gate.allows(tier):
            self.state = "muted"
            return None
        if self._tree is not None:
            info = self._tree.cursor(self._tail_start())
            if info.broken:
                self.state = "broken"
                return None
            if info.skip and not lex.lang.object_notation:
                self.state = "skip"
                return None
        tokens = self._tokens(ctx.tokens[-1], text)
        tokens = tokens[: ctx.max_tokens]
        self.state = tier
        return Draft(tokens, self.name, tier) if tokens else None

    def _tail_start(self) -> int:
        """Byte offset where the statement being typed starts (ERRORs after it are the tail)."""
        lex, tree = self._lex, self._tree
        assert lex is not None and tree is not None
        first = lex.line_no
        for entry in lex.stack:
            first = min(first, entry.line)
        for entry in lex.tags:
            first = min(first, entry.line)
        return tree.line_start(first)

    def _tokens(self, pending: int, text: str) -> tuple[int, ...]:
        """Token ids of ``text`` as the model would write them after ``pending``."""
        key = (pending, text)
        hit = self._token_cache.get(key)
        if hit is not None:
            return hit
        model = self.model
        head = model.token_bytes(pending).decode("utf-8", "ignore")
        result: tuple[int, ...] = ()
        if head:
            ids = model.tokenize(head + text, add_bos=False)
            if ids and ids[0] == pending:
                result = tuple(ids[1:])
        if not result:
            result = tuple(model.tokenize(text, add_bos=False))
        if len(self._token_cache) > 4096:
            self._token_cache.clear()
        self._token_cache[key] = result
        return result

    def candidate(self) -> tuple[str, str] | None:
        """The syntax continuation the lexical state implies: ``(text, tier)`` or ``None``."""
        lex = self._lex
        if lex is None:
            return None
        if lex.lang.object_notation:
            return json_candidate(lex)
        if lex.lang.block_style == "tag":
            return html_candidate(lex)
        return code_candidate(lex, self.all_tiers)

    def observe(self, draft: Draft, accepted: int) -> None:
        self.gate.observe(draft.tier, accepted)
