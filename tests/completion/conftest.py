"""The completion tests' machine: prompt evaluation runs at a scripted rate.

The window of a first answer at a new place is the measured prompt rate times
a latency target (``prompt.first_window``). The stand-in evaluates a chunk in
microseconds, at a rate that changes with the load of the machine running the
tests, so a measured rate would make the window (and every test that looks at
a prompt) depend on the machine. Every chunk here measures 1,000 tokens/s, a
CPU's rate for the default model: the first window is then its floor. A test
that wants another rate feeds ``PromptRate.observe`` itself, or overrides this
fixture.
"""

from __future__ import annotations

import pytest

from structspec.completion.prewarm import PromptRate

#: Tokens/s every measured prefill chunk reports in these tests.
SCRIPTED_PROMPT_RATE = 1000.0


@pytest.fixture(autouse=True)
def scripted_prompt_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    observe = PromptRate.observe

    def scripted(self: PromptRate, tokens: int, seconds: float) -> None:
        observe(self, tokens, tokens / SCRIPTED_PROMPT_RATE)

    monkeypatch.setattr(PromptRate, "observe", scripted)
