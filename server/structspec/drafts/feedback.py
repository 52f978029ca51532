"""Feedback gates shared by draft sources: mute what the model keeps rejecting.

The planner learns acceptance per ``source:tier``, but inside a source a
single rule or tier can fail where its siblings succeed. These gates take a
source's ``observe`` feedback and mute the failing part for a while, so that
one bad rule neither wastes passes nor drags its tier's estimate down. They
live here, not in a source module, so that no source imports another.
"""

from __future__ import annotations

from collections.abc import Hashable


class Cooldown:
    """Mutes a rule after ``after`` first-token rejections in a row, for ``passes`` passes.

    The cooldown doubles each time the rule fails again after serving one (up
    to 1024x): a rule the model keeps disagreeing with fades out, one that
    failed by bad luck comes back. ``tick`` is called once per pass.
    """

    def __init__(self, after: int = 3, passes: int = 64) -> None:
        self.after = max(1, after)
        self.passes = max(1, passes)
        self.now = 0
        self._fails: dict[Hashable, int] = {}  # consecutive first-token rejections
        self._strikes: dict[Hashable, int] = {}  # cooldowns served
        self._until: dict[Hashable, int] = {}  # key -> pass at which its cooldown ends

    def tick(self) -> None:
        self.now += 1

    def muted(self, key: Hashable) -> bool:
        until = self._until.get(key)
        if until is None:
            return False
        if self.now < until:
            return True
        del self._until[key]
        return False

    def record(self, key: Hashable, success: bool) -> None:
        """Feedback on a draft of ``key``: ``success`` if its first token was accepted."""
        if success:
            self._fails.pop(key, None)
            return
        fails = self._fails.get(key, 0) + 1
        if fails < self.after:
            self._fails[key] = fails
            return
        self._fails.pop(key, None)
        strikes = self._strikes.get(key, 0)
        self._strikes[key] = strikes + 1
        self._until[key] = self.now + self.passes * (2 ** min(strikes, 10))


class TierGate:
    """Stops proposing a tier the model keeps rejecting, and probes it again now and then.

    The planner learns acceptance per ``source:tier`` too, but a tier it has
    never tried borrows the source's estimate: one poor tier would drag a good
    source down with it. The gate keeps decayed counts of the first drafted
    token's acceptance per tier (from ``observe``); a tier below ``floor`` after
    ``min_trials`` is muted, except for one proposal in ``probe_every``.
    """

    def __init__(
        self,
        *,
        floor: float = 0.35,
        min_trials: float = 6.0,
        decay: float = 0.97,
        probe_every: int = 40,
    ) -> None:
        self.floor = floor
        self.min_trials = min_trials
        self.decay = decay
        self.probe_every = probe_every
        self._trials: dict[str, float] = {}
        self._hits: dict[str, float] = {}
        self._muted: dict[str, int] = {}

    def allows(self, tier: str) -> bool:
        muted = self._muted.get(tier)
        if muted is None:
            return True
        self._muted[tier] = muted + 1
        return muted % self.probe_every == self.probe_every - 1

    def observe(self, tier: str, accepted: int) -> None:
        t = self._trials.get(tier, 0.0) * self.decay + 1.0
        h = self._hits.get(tier, 0.0) * self.decay + (1.0 if accepted > 0 else 0.0)
        self._trials[tier], self._hits[tier] = t, h
        if t >= self.min_trials and h / t < self.floor:
            self._muted.setdefault(tier, 0)
        else:
            self._muted.pop(tier, None)
