"""Python syntax drafting: deterministic transitions of Python source.

``RULES`` lists transitions such as ``for x`` -> `` in``, a block opener's
``:`` -> newline + one more indentation level, ``def __init__(`` -> ``self``,
``if __name__`` -> `` == "__main__":``. Each rule is a pattern over one line
and a continuation:

- kind ``line``: the pattern must match the whole current line (the text
  after the last newline); the draft continues that line;
- kind ``newline``: the current line is empty (a newline was just written) and
  the pattern matches the whole previous line; the draft starts the new line.

A continuation may use ``{indent}``, the leading whitespace of the matched line,
and ``{step}``, one indentation level (four spaces). A rule without a
continuation is a *veto*: where it matches, nothing is drafted (for example no
indentation guess after ``return``, where the next line dedents by an unknown
amount). The first matching rule wins.

Two engines run the same rules:

- ``PythonSyntaxProposer``, the reference: Python's ``re`` on the decoded text;
- ``FastSyntaxFSM``, the hot path: the patterns are compiled (by
  ``regex_automaton``, a small compiler for the regular-expression subset the
  rules use) into one byte-level
  automaton; its state is advanced token by token through a per-(state, token)
  transition cache, so after warm-up a pass costs a few dictionary hits and no
  regular expression runs at all. The tests prove both engines agree.

Token boundaries: a continuation is text, but a draft must be the exact token
ids the model would emit. Because a continuation may merge with the token
before it (Gemma writes ``):`` as one token), the ids are those of
``tokenize(last_token_text + continuation)`` after the last token, and there is
no draft when the last token does not survive that tokenization unchanged.
Conversions are cached per (last token, continuation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.feedback import Cooldown
from structspec.drafts.regex_automaton import NFA, compile_patterns
from structspec.model.base import Model

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions

#: Acceptance priors of the tiers for the planner (``PythonSyntaxSource.priors``):
#: first-token acceptance measured on 8 stdlib modules (0.97 / 0.86 / 0.74) and on
#: 24 HumanEval greedy outputs of the default model (1.0 / 1.0 / 0.93).
PRIORS = {"python:deterministic": 0.95, "python:strong": 0.85, "python:frequent": 0.75}

STEP = "    "
WS = "[ \t]*"
ID = "[A-Za-z_][A-Za-z0-9_]*"
DOTTED = f"{ID}(\\.{ID})*"
#: Text without a colon outside one level of square brackets (so slices don't count as the end).
BODY = "([^\\[\\]:]|\\[[^\\[\\]]*\\])*"
NEWBLOCK = "\n{indent}{step}"
TARGETS = f"{ID}(, ?{ID})*"
FOR = f"{WS}(async )?for {TARGETS} in "


@dataclass(frozen=True, slots=True)
class SyntaxRule:
    """A transition: where ``pattern`` matches a line, draft ``continuation`` (None: veto)."""

    name: str
    pattern: str
    continuation: str | None
    kind: str = "line"  # "line" or "newline"
    tier: str = "deterministic"


def _calls(names: Sequence[str], prefix: str, cont: str, tier: str) -> list[SyntaxRule]:
    return [SyntaxRule(f"call:{n}", f"{prefix}{n}", cont, "line", tier) for n in names]


#: Builtins nearly always called right away where code (not prose) names them.
_BUILTIN_CALLS = (
    "len", "range", "enumerate", "zip", "sorted", "isinstance", "sum", "min", "abs",
    "hasattr", "getattr", "setattr", "divmod", "issubclass", "round", "callable", "iter",
)  # fmt: skip
#: Methods followed by an argument list that starts with a name (not a string or a bracket).
_METHOD_ARGS = ("append", "extend", "insert", "join", "remove", "update", "format")
#: Block openers whose body starts on the next line, one level deeper.
_OPENERS = [
    ("def", f"{WS}(async )?def {ID}\\(.*\\)( -> .+)?:"),
    ("class", f"{WS}class {ID}(\\(.*\\))?:"),
    ("if", f"{WS}(el)?if {BODY}:"),
    ("while", f"{WS}while {BODY}:"),
    ("for", f"{WS}(async )?for {BODY}:"),
    ("with", f"{WS}(async )?with {BODY}:"),
    ("else", f"{WS}(else|try|finally):"),
    ("except", f"{WS}except( {BODY})?:"),
]
#: Where a builtin's name is code: after an operator or bracket, or a statement keyword.
_CODE = f"(.*[=\\(\\[\\{{] ?|{WS}((return|if|elif|while|assert|yield)( not)? )?)"

RULES: tuple[SyntaxRule, ...] = (
    # -- fixed phrases ----------------------------------------------------------
    SyntaxRule("main-guard", f"{WS}if __name__", ' == "__main__":' + NEWBLOCK),
    SyntaxRule("main-guard-eq", f"{WS}if __name__ ==", ' "__main__":' + NEWBLOCK),
    SyntaxRule("future", f"{WS}from __future__", " import annotations"),
    SyntaxRule("future-import", f"{WS}from __future__ import", " annotations"),
    SyntaxRule("init-self", f"{WS}def __init__\\(", "self"),
    SyntaxRule("new-cls", f"{WS}def __new__\\(", "cls"),
    SyntaxRule("repr-self", f"{WS}def __(repr|str|len|iter|hash|bool|enter)__\\(", "self):"),
    SyntaxRule("coding", f"{WS}# -\\*- coding", ": utf-8 -*-"),
    SyntaxRule("numpy", f"{WS}import numpy", " as np", tier="strong"),
    SyntaxRule("pandas", f"{WS}import pandas", " as pd", tier="strong"),
    SyntaxRule("pyplot", f"{WS}import matplotlib\\.pyplot", " as plt", tier="strong"),
    SyntaxRule("from-typing", f"{WS}from typing", " import"),
    SyntaxRule("from-import", f"{WS}from {DOTTED}", " import", tier="frequent"),
    # -- loops --------------------------------------------------------------------
    SyntaxRule("for-range-len", f"{FOR}range\\(len", "("),
    SyntaxRule("for-iter-call", f"{FOR}(range|enumerate|zip|sorted|reversed)", "("),
    SyntaxRule("for-in-pair", f"{WS}(async )?for {ID}, ?{ID}", " in", tier="frequent"),
    SyntaxRule("for-in", f"{WS}(async )?for {ID}", " in", tier="frequent"),
    SyntaxRule("while-true", f"{WS}while True", ":" + NEWBLOCK),
    # -- blocks -------------------------------------------------------------------
    SyntaxRule("else", f"{WS}(else|try|finally)", ":" + NEWBLOCK),
    SyntaxRule("except-as", f"{WS}except {DOTTED} as {ID}", ":" + NEWBLOCK, tier="strong"),
    SyntaxRule("with-open", f"{WS}with open", "("),
    SyntaxRule("with-as", f"{WS}with .*\\) as {ID}", ":" + NEWBLOCK, tier="strong"),
    *[SyntaxRule(f"block:{n}", p, NEWBLOCK) for n, p in _OPENERS],
    # -- decorators ---------------------------------------------------------------
    SyntaxRule(
        "decorator", f"{WS}@(staticmethod|classmethod|property|abstractmethod)", "\n{indent}def"
    ),
    # -- statements that end their line ------------------------------------------------
    SyntaxRule("jump", f"{WS}(pass|break|continue)", "\n", tier="frequent"),
    SyntaxRule(
        "init-empty",
        f"{WS}{ID} = (\\[\\]|\\{{\\}}|0|None|True|False|set\\(\\))",
        "\n",
        tier="frequent",
    ),
    SyntaxRule(
        "raise-call", f"{WS}raise (ValueError|TypeError|KeyError|IndexError)", "(", tier="frequent"
    ),
    # -- expressions ------------------------------------------------------------------
    SyntaxRule("lambda", f".*lambda {ID}(, {ID})*", ":", tier="strong"),
    SyntaxRule("class-name", ".*\\.__class__", ".__name__", tier="strong"),
    *_calls(_BUILTIN_CALLS, _CODE, "(", "strong"),
    *_calls(_METHOD_ARGS, ".*\\.", "(", "strong"),
    # -- the indentation of a new line -------------------------------------------------
    *[SyntaxRule(f"indent:{n}", p, "{indent}{step}", "newline") for n, p in _OPENERS],
    SyntaxRule("dedent", f"{WS}(return|raise|pass|break|continue)( .*)?", None, "newline"),
    SyntaxRule("open-bracket", ".*[\\(\\[\\{,\\\\]", None, "newline"),
    SyntaxRule("decorated", f"{WS}@.*", "{indent}def", "newline", "strong"),
    SyntaxRule("comment", f"{WS}#.*", None, "newline"),
    SyntaxRule("same-indent", f"{WS}[^ \t].*", "{indent}", "newline", "frequent"),
)


def _render(rule: SyntaxRule, indent: bytes) -> bytes | None:
    if rule.continuation is None:
        return None
    text = rule.continuation.replace("{indent}", indent.decode("latin-1"))
    return text.replace("{step}", STEP).encode("latin-1")


def _leading_ws(line: bytes) -> bytes:
    return line[: len(line) - len(line.lstrip(b" \t"))]


def continuation_ids(model: Model, last: int, cont: bytes) -> tuple[int, ...] | None:
    """The token ids the model writes for ``cont`` after token ``last`` (see module docstring)."""
    piece = model.token_bytes(last)
    try:
        text = (piece + cont).decode("utf-8")
    except UnicodeDecodeError:
        return None
    ids = model.tokenize(text, add_bos=False)
    if piece:
        if not ids or ids[0] != last:
            return None  # the continuation merges into the last token
        ids = ids[1:]
    if not ids or b"".join(model.token_bytes(t) for t in ids) != cont:
        return None  # the vocabulary cannot spell it (or spells it otherwise)
    return tuple(ids)


# --------------------------------------------------------------------------- reference


class PythonSyntaxProposer:
    """The reference engine: ``re.fullmatch`` of every rule on the current/previous line."""

    def __init__(self, rules: Sequence[SyntaxRule] = RULES) -> None:
        self.rules = tuple(rules)
        self._compiled = [re.compile(r.pattern.encode()) for r in self.rules]

    def match(self, text: bytes) -> tuple[int, bytes] | None:
        """``(rule index, indent of the matched line)`` of the first rule matching at the end."""
        cut = text.rfind(b"\n")
        line = text[cut + 1 :]
        if line:
            kind, subject = "line", line
        elif cut >= 0:
            kind, subject = "newline", text[text.rfind(b"\n", 0, cut) + 1 : cut]
        else:
            return None
        for i, (rule, rx) in enumerate(zip(self.rules, self._compiled, strict=True)):
            if rule.kind == kind and rx.fullmatch(subject):
                return i, _leading_ws(subject)
        return None

    def propose_text(self, text: bytes) -> bytes | None:
        """The continuation text after ``text`` (None: no rule, or a veto)."""
        hit = self.match(text)
        return None if hit is None else _render(self.rules[hit[0]], hit[1])

    def propose(self, model: Model, tokens: Sequence[int]) -> tuple[int, ...] | None:
        """Draft ids after ``tokens`` (the whole text is decoded: slow, for reference)."""
        if not tokens:
            return None
        cont = self.propose_text(b"".join(model.token_bytes(t) for t in tokens))
        return None if cont is None else continuation_ids(model, tokens[-1], cont)


def compile_rules(rules: Sequence[SyntaxRule]) -> tuple[NFA, int]:
    """One NFA for all rules; its accepting states name their rule (by index)."""
    return compile_patterns([rule.pattern for rule in rules])


# --------------------------------------------------------------------------- the FSM

#: FSM state: (line DFA state, leading whitespace of the line, still in it,
#: first newline-rule matching the previous line (-1: none), its leading whitespace).
State = tuple[int, bytes, bool, int, bytes]


class FastSyntaxFSM:
    """The rules as a token-id state machine (see the module docstring)."""

    def __init__(self, model: Model, rules: Sequence[SyntaxRule] = RULES) -> None:
        self.model = model
        self.rules = tuple(rules)
        self._nfa, nfa_start = compile_rules(self.rules)
        self._dfa_ids: dict[frozenset[int], int] = {}
        self._dfa_sets: list[frozenset[int]] = []
        self._dfa_next: list[dict[int, int]] = []
        self._line_rule: list[int] = []  # first matching line rule per DFA state (-1 none)
        self._newline_rule: list[int] = []  # same for newline rules
        self._start = self._dfa_state(self._closure({nfa_start}))
        self.initial: State = (self._start, b"", True, -1, b"")
        self._token_cache: dict[tuple[State, int], State] = {}
        self._draft_cache: dict[tuple[int, bytes, int], tuple[int, ...] | None] = {}

    # -- DFA by lazy subset construction ---------------------------------------------
    def _closure(self, states: set[int]) -> frozenset[int]:
        stack, seen = list(states), set(states)
        while stack:
            for t in self._nfa.eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    def _dfa_state(self, states: frozenset[int]) -> int:
        sid = self._dfa_ids.get(states)
        if sid is None:
            sid = len(self._dfa_sets)
            self._dfa_ids[states] = sid
            self._dfa_sets.append(states)
            self._dfa_next.append({})
            hits = sorted(self._nfa.final[s] for s in states if s in self._nfa.final)
            line = [i for i in hits if self.rules[i].kind == "line"]
            newline = [i for i in hits if self.rules[i].kind == "newline"]
            self._line_rule.append(line[0] if line else -1)
            self._newline_rule.append(newline[0] if newline else -1)
        return sid

    def _step_byte(self, sid: int, byte: int) -> int:
        nxt = self._dfa_next[sid].get(byte)
        if nxt is None:
            targets = {
                t for s in self._dfa_sets[sid] for chars, t in self._nfa.edges[s] if byte in chars
            }
            nxt = self._dfa_state(self._closure(targets))
            self._dfa_next[sid][byte] = nxt
        return nxt

    # -- tokens ---------------------------------------------------------------------
    def advance(self, state: State, token: int) -> State:
        """The state after ``token`` (cached per state and token)."""
        key = (state, token)
        nxt = self._token_cache.get(key)
        if nxt is None:
            if len(self._token_cache) > 200_000:
                self._token_cache.clear()
            nxt = self._advance_bytes(state, self.model.token_bytes(token))
            self._token_cache[key] = nxt
        return nxt

    def _advance_bytes(self, state: State, data: bytes) -> State:
        sid, lead, in_lead, prev_rule, prev_lead = state
        for byte in data:
            if byte == 10:
                prev_rule, prev_lead = self._newline_rule[sid], lead
                sid, lead, in_lead = self._start, b"", True
                continue
            sid = self._step_byte(sid, byte)
            if in_lead and byte in (32, 9):
                lead += bytes((byte,))
            else:
                in_lead = False
        return sid, lead, in_lead, prev_rule, prev_lead

    def run(self, tokens: Sequence[int], state: State | None = None) -> State:
        """The state after ``tokens`` from ``state`` (default: the start of a text)."""
        state = self.initial if state is None else state
        for t in tokens:
            state = self.advance(state, t)
        return state

    def warm_up(self, text: str) -> None:
        """Run ``text`` through the machine (and its drafts) to fill the caches."""
        try:
            ids = self.model.tokenize(text, add_bos=False)
        except Exception:  # a tokenizer that cannot take it: caches fill on the hot path instead
            return
        state = self.initial
        for tok in ids:
            state = self.advance(state, tok)
            self.propose(state, tok)

    def sync_start(self, tokens: Sequence[int]) -> int:
        """An index from which running the FSM gives the same state as from 0.

        The state depends only on the last two lines, so the run can begin at
        the token holding the second-to-last newline.
        """
        newlines = 0
        for i in range(len(tokens) - 1, -1, -1):
            newlines += self.model.token_bytes(tokens[i]).count(b"\n")
            if newlines >= 2:
                return i
        return 0

    def rule_of(self, state: State) -> tuple[int, bytes] | None:
        """``(rule index, indent)`` of the rule that fires in ``state``, like the reference."""
        sid, lead, in_lead, prev_rule, prev_lead = state
        if in_lead and not lead:
            # Nothing since the last newline: every byte either extends ``lead`` or ends it.
            return (prev_rule, prev_lead) if prev_rule >= 0 else None
        rule = self._line_rule[sid]
        return (rule, lead) if rule >= 0 else None

    def propose(self, state: State, last: int) -> tuple[tuple[int, ...], int] | None:
        """Draft ids and the rule index in ``state`` after token ``last``."""
        hit = self.rule_of(state)
        if hit is None:
            return None
        rule, indent = hit
        key = (rule, indent, last)
        if key in self._draft_cache:
            ids = self._draft_cache[key]
        else:
            cont = _render(self.rules[rule], indent)
            ids = None if cont is None else continuation_ids(self.model, last, cont)
            if len(self._draft_cache) > 100_000:
                self._draft_cache.clear()
            self._draft_cache[key] = ids
        return None if ids is None else (ids, rule)


#: Typical Python run through the FSM when a source is made, so that the automaton's
#: common states and the conversions of common drafts are built before the first pass.
WARM_UP = """from __future__ import annotations

import os
from typing import List


class Item(Base):
    \"\"\"An item.\"\"\"

    @property
    def size(self) -> int:
        return len(self.parts)

    def __init__(self, name, parts=None):
        self.name = name
        self.parts = []
        for i, part in enumerate(parts or []):
            if isinstance(part, str) and not part:
                continue
            elif part is None:
                break
            else:
                self.parts.append(part)


def solve(numbers: List[int], k: int) -> List[int]:
    result = []
    for i in range(len(numbers)):
        for j in range(i + 1, len(numbers)):
            if numbers[i] + numbers[j] == k:
                result.append((i, j))
    while True:
        try:
            total = sum(numbers)
        except ValueError as exc:
            raise TypeError(exc)
        finally:
            pass
    return sorted(result, key=lambda x: x[0])


if __name__ == "__main__":
    print(solve([1, 2, 3], 4))
"""


class PythonSyntaxSource:
    """Drafts Python syntax transitions with ``FastSyntaxFSM`` (Python or unknown language)."""

    name = "python"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> PythonSyntaxSource:
        """The registry's constructor (``structspec.drafts.registry``)."""
        return cls(model)

    def __init__(
        self,
        model: Model,
        rules: Sequence[SyntaxRule] = RULES,
        *,
        cooldown_after: int = 3,
        cooldown_passes: int = 32,
    ) -> None:
        self.fsm = FastSyntaxFSM(model, rules)
        self.fsm.warm_up(WARM_UP)
        self.cooldown = Cooldown(cooldown_after, cooldown_passes)
        self._seq: list[int] | None = None
        self._generation = -1
        self._done = 0
        self._state: State = self.fsm.initial
        self._last: tuple[int, tuple[int, ...]] | None = None

    def _sync(self, ctx: DraftContext) -> State:
        toks = ctx.tokens
        if ctx.generation != self._generation or toks is not self._seq or len(toks) < self._done:
            self._generation, self._seq = ctx.generation, toks
            self._done = self.fsm.sync_start(toks)
            self._state = self.fsm.initial
        state = self._state
        for i in range(self._done, len(toks)):
            state = self.fsm.advance(state, toks[i])
        self._state, self._done = state, len(toks)
        return state

    def propose(self, ctx: DraftContext) -> Draft | None:
        self.cooldown.tick()
        if ctx.language not in (None, "python") or not ctx.tokens or ctx.max_tokens <= 0:
            return None
        hit = self.fsm.propose(self._sync(ctx), ctx.tokens[-1])
        if hit is None or self.cooldown.muted(hit[1]):
            return None
        ids, rule = hit
        self._last = (rule, ids)
        return Draft(ids[: ctx.max_tokens], self.name, self.fsm.rules[rule].tier)

    def observe(self, draft: Draft, accepted: int) -> None:
        last = self._last
        if last is None or draft.tokens != last[1][: len(draft.tokens)]:
            return
        self.cooldown.record(last[0], accepted > 0)
