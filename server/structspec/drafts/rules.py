"""The ``rules`` draft source: drafts from a mined rule set, with per-tier caps and cooldown.

The rule set (format, loading, lookup) is ``rule_set``; mining is
``rule_miner``.

Cooldown
    A rule whose drafts are rejected at the first token ``cooldown_after``
    times in a row is muted for a number of passes that doubles each time it
    fails again after a cooldown (the model, not the corpus, is the truth).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.feedback import Cooldown

# Re-exported: ``structspec mine`` and older callers import these from here.
from structspec.drafts.rule_miner import MineOptions as MineOptions
from structspec.drafts.rule_miner import mine_rules as mine_rules
from structspec.drafts.rule_set import LANGUAGE_OF_SUFFIX as LANGUAGE_OF_SUFFIX
from structspec.drafts.rule_set import Rule as Rule
from structspec.drafts.rule_set import RulesError as RulesError
from structspec.drafts.rule_set import RuleSet as RuleSet
from structspec.drafts.rule_set import Tokenizer as Tokenizer
from structspec.drafts.rule_set import default_rules_path as default_rules_path
from structspec.drafts.rule_set import tier_of as tier_of
from structspec.drafts.rule_set import vocab_fingerprint as vocab_fingerprint

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions

#: Longest draft a rule of each tier may propose.
DEFAULT_CAPS = {"deterministic": 12, "strong": 8, "frequent": 4}

#: Acceptance priors of the tiers for the planner (``RulesSource.priors``):
#: first-token acceptance measured on 8 held-out stdlib modules (0.94 / 0.71 / 0.45)
#: and on 24 HumanEval greedy outputs of the default model (1.0 / 0.9 / 0.65).
PRIORS = {"rules:deterministic": 0.95, "rules:strong": 0.75, "rules:frequent": 0.5}


class RulesSource:
    """Drafts from mined rules, with per-tier caps and cooldown of failing rules."""

    name = "rules"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Tokenizer, options: SourceOptions) -> RulesSource:
        """The registry's constructor: ``options.rules_file``, else the packaged rules.

        Raises ``RulesError`` for a rules file that cannot be used.
        """
        if options.rules_file:
            return cls.load(options.rules_file, model)
        return cls.default(model)

    def __init__(
        self,
        rules: RuleSet,
        *,
        caps: dict[str, int] | None = None,
        cooldown_after: int = 3,
        cooldown_passes: int = 64,
    ) -> None:
        self.rules = rules
        self.caps = {**DEFAULT_CAPS, **(caps or {})}
        self.cooldown = Cooldown(cooldown_after, cooldown_passes)
        self.warnings = list(rules.warnings)
        self._languages = frozenset(rules.languages)
        self._last: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    @classmethod
    def load(cls, path: str | Path, model: Tokenizer, **kwargs: Any) -> RulesSource:
        """A source over the rules file at ``path``; ``RulesError`` if it cannot be used."""
        return cls(RuleSet.load(path, model), **kwargs)

    @classmethod
    def default(cls, model: Tokenizer, **kwargs: Any) -> RulesSource:
        """The packaged default rules; an empty source with a warning if they do not fit."""
        try:
            return cls.load(default_rules_path(), model, **kwargs)
        except RulesError as exc:
            source = cls(RuleSet({}, 1, 1), **kwargs)
            source.warnings.append(f"rules source disabled: {exc}")
            return source

    def muted(self, context: Sequence[int]) -> bool:
        """Whether the rule of ``context`` is cooling down now."""
        return self.cooldown.muted(tuple(context))

    def propose(self, ctx: DraftContext) -> Draft | None:
        self.cooldown.tick()
        if ctx.max_tokens <= 0 or not self.rules.rules:
            return None
        if ctx.language is not None and self._languages and ctx.language not in self._languages:
            return None
        rule = self.rules.lookup(ctx.tokens)
        if rule is None or rule.veto or self.cooldown.muted(rule.context):
            return None
        cont = rule.continuation[: min(ctx.max_tokens, self.caps.get(rule.tier, 0))]
        if not cont:
            return None
        self._last = (rule.context, cont)
        return Draft(cont, self.name, rule.tier)

    def observe(self, draft: Draft, accepted: int) -> None:
        last = self._last
        # The planner may have cut the draft: it is ours if it is a prefix of the last proposal.
        if last is None or draft.tokens != last[1][: len(draft.tokens)]:
            return
        self.cooldown.record(last[0], accepted > 0)
