"""Editor benchmark: type real code of other projects against the real language server.

A user is simulated over stdio against a ``structspec-lsp`` subprocess (the
same program an editor starts) running with the default settings (the
debounce included). The files typed are not this project's: by default real
source files of several languages found on the machine, chosen the way the
mixed suite chooses them (``bench/mixed.py``), never one under the
repository. At several cursor points of each file the line there is cleared
back to its indentation, and at each point:

1. *after accept*: a suggestion is asked for at the cleared line; when one
   comes back, after ``READ_S`` seconds (the user reads it; the server's
   pre-generation works meanwhile) it is accepted as VS Code does (a
   ``didChange`` inserting the
   item's ``insertText`` over its ``range``, then the item's command), and a
   suggestion is asked for at once at the new cursor. While that one goes on
   with the same line (a suggestion can end mid-line: ``maxGenerationMs``),
   the user reads and accepts it too, up to ``MAX_ACCEPTS`` in a row: the user
   takes the whole line. Then Enter is typed with an editor's auto-indent (the
   line's indentation, one unit deeper after a block opener) and one is asked
   for on the new line (*next line*);
2. the point's text is restored (a full-text ``didChange``) and the line's
   real text (not the suggestion) is typed one character at a time: every
   keystroke is a ``didChange`` followed by a ``textDocument/inlineCompletion``
   request, and the time from sending the keystroke to receiving the answer is
   the keystroke-to-suggestion latency.

Requests are sequential (the next key is typed once the answer is in), so each
latency is the server's alone. After every answer the server's status tells
whether the model computed it or it was served without the model (its
``servedFrom*`` counters: typed-through and pre-generated answers); the status
request is not timed. The first request of a run (a cold prefill of the whole
prompt) is reported separately.

A user does not wait for the server, though. A third server, ``structspec,
paced``, types each point's line at a steady ``PACE_MS`` per key, starting
``ARRIVE_S`` after arriving at the point, and never waits: every keystroke is
a ``didChange`` and a request, and a request still unanswered when the next
key comes is cancelled (``$/cancelRequest``, as VS Code does when the document
changes). It reports what such a user sees (``paced_summary``): how many
keystrokes were answered before the next one, how many of those answers
showed a suggestion, and how long after the first keystroke at a point the
first suggestion appeared, with the prompt evaluation of a new place in it.

A fourth server, ``structspec, jump``, is a plain client (no
``structspec/didMoveCursor``) that opens each file or jumps far within it and
types the line at once (``bench/jump.py``): it reports the wait for the first
suggestion at a new place and the empty answers by the server's reason.

The configurations run as servers side by side, typing in turn at each cursor
point (each left alone for ``SETTLE_S`` after its turn, so that its
background work does not slow the next server's), so a busy phase of a shared
machine hits all of them alike:
``structspec`` (the defaults) and ``greedy`` (``speculative: false``), and
with ``variant`` (``--variant debounceMs=0``) the defaults with those settings
changed, sequential and paced: an A/B of a setting on the same points, in turn.
``contention`` replays ``structspec`` and the variant (and their paced users)
once more, on fresh servers, while busy-loop processes compete for the CPU.

The ``structspec`` server runs with ``STRUCTSPEC_TRACE`` set
(``completion/trace.py``); afterwards every traced token is checked against
the teacher-forced argmax of the model loaded in-process, counted as the
other suites count (``bench/harness.py``: ``Exactness``). With ``record``
(``--record OUT``) the trace is kept and written as a recording for
``structspec benchmark --replay`` (``bench/replay.py``).

This module runs the configurations and checks the trace; the cursor points
and the editor's edits are ``bench/points.py``, the simulated user against
one server ``bench/typist.py`` (over ``bench/lsp_client.py``), what it
measures ``bench/editor_stats.py`` and the printed report
``bench/editor_report.py``. With a remote engine (``backend``), two more
configurations, ``remote`` and ``remote, paced``, type through it, and what
its log says is reported after the rest (``bench/remote_editor.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from structspec.bench.editor_report import print_plan, report_results
from structspec.bench.editor_stats import ConfigResult
from structspec.bench.harness import NEAR_TIE, Exactness, output_gaps
from structspec.bench.jump import JUMP, JumpServer
from structspec.bench.points import (
    MAX_CHARS,
    POINTS_PER_FILE,
    Point,
    default_files,
    first_points,
    language_id,
    plan_points,
)
from structspec.bench.remote_editor import REMOTE, REMOTE_PACED, RemoteEngine
from structspec.bench.typist import InHand, Out, ReplayedServer, run_servers
from structspec.config import Settings

if TYPE_CHECKING:
    from structspec.model.base import Model

#: The paced configuration's name (the defaults, typed at ``PACE_MS``).
PACED = "structspec, paced"

CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("structspec", {}),
    ("greedy", {"speculative": False}),
)


def variant_name(base: str, variant: dict[str, Any]) -> str:
    """``structspec, debounceMs=0``: a configuration named by the settings it changes."""
    return ", ".join([base, *(f"{k}={json.dumps(v)}" for k, v in variant.items())])


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` processes spinning on the CPU while the block runs; always killed after it."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", "while True: pass"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


async def _replay(replays: Sequence[ReplayedServer], points: Sequence[Point], out: Out) -> None:
    """Replay every server, interleaved point by point; close them all."""

    async def run(hand: InHand[ReplayedServer]) -> None:
        for point in points:
            for current in hand.each():
                await current.run_point(point)

    await run_servers(replays, out, run)


def check_trace(model: Model, trace: Path) -> tuple[Exactness, int]:
    """Check every traced token against the teacher-forced argmax.

    Returns the counts (``Exactness``: exact, near-tie, off as the other suites
    count them) and how many tokens were left unchecked because token healing
    constrained them (they reproduce the prompt's removed bytes, not the plain
    argmax). Consecutive generations share most of their prompt, so the
    model's cache is kept between them (only what differs is evaluated). That
    changes the batch shapes of the check itself, which alone can move a
    near-tie past ``NEAR_TIE``: a generation with a token off is checked again
    as the other suites check (``harness.output_gaps``: prompt and output in
    one batch from an empty cache, and where a token is still off, one row per
    pass as plain greedy decoding evaluates it), and that check counts.
    """
    exact = Exactness()
    constrained = 0
    if not trace.is_file():
        return exact, 0
    with trace.open(encoding="utf-8") as fh:
        for line in fh:
            entry = json.loads(line)
            if "prompt" not in entry:
                continue  # a token list the draft sources read (``completion/trace.py``)
            prompt, tokens = entry["prompt"], entry["tokens"]
            removed = len(bytes.fromhex(entry.get("healed", "")))
            skip = done = 0
            while skip < len(tokens) and done < removed:
                done += len(model.token_bytes(tokens[skip]))
                skip += 1
            gaps = [c.gap for c in model.teacher_forced(prompt, tokens)[skip:]]
            stepwise = False
            if any(g > NEAR_TIE for g in gaps):
                gaps, stepwise = output_gaps(model, prompt, tokens)
                gaps = gaps[skip:]
            exact.add(gaps, rechecked=stepwise)
            constrained += skip
    return exact, constrained


def write_recording(model: Model, trace: Path, record: Path, threads: int, out: Out) -> None:
    """Write ``trace`` as a replay recording with ``model``'s cost table (measured once)."""
    from structspec.bench.recording import recording_from_trace
    from structspec.runtime import cost_model_for

    rec = recording_from_trace(
        trace, model=model.name, cost_ms=cost_model_for(model).ms, threads=threads
    )
    record.write_text(rec.to_json(), encoding="utf-8")
    kinds: dict[str, int] = {}
    for p in rec.prompts:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    out(
        f"  recorded {len(rec.prompts)} generations to {record} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}; trace {trace})"
    )


def run_editor_benchmark(
    files: list[str],
    model: str,
    threads: int,
    out: Out = print,
    *,
    points_per_file: int = POINTS_PER_FILE,
    max_chars: int = MAX_CHARS,
    limit: int | None = None,
    contention: int = 0,
    exactness: bool = True,
    paced: bool = True,
    jump: bool = True,
    timeout_s: float = 300.0,
    log_dir: Path | None = None,
    record: Path | None = None,
    variant: dict[str, Any] | None = None,
    backend: RemoteEngine | None = None,
) -> dict[str, Any]:
    """Replay typing through ``files`` in every configuration; print a report; return the numbers.

    ``files`` empty: ``default_files()``. ``model`` is a model spec (a GGUF
    path, ``""`` for the default model, ``standin`` for a smoke run).
    ``limit``: that many cursor points, the files' first ones in turn. ``contention``: busy-loop
    processes for a second, loaded replay of ``structspec`` (0: none).
    ``exactness``: the teacher-forced check of the traced tokens. ``paced``: also a
    ``structspec`` server typed at ``PACE_MS`` (quiet, and loaded with ``contention``),
    reported apart (``paced_summary``). ``jump``: also the "jump and type" user
    (``bench/jump.py``), quiet only, reported apart (``jump_summary``). ``log_dir``: each
    server writes its log there (``<configuration>.log``). ``record``: keep the
    ``structspec`` server's trace at ``<record>.trace.jsonl`` and write it as a
    recording for ``structspec benchmark --replay`` to ``record``
    (``bench/recording.py``: ``recording_from_trace``). ``variant``: settings (LSP
    spelling, as ``initializationOptions``) of one more configuration typed in
    turn with the others, and of one more paced one. ``backend``: a remote
    engine typed through by two more configurations, ``remote`` and ``remote,
    paced`` (``bench/remote_editor.py``).
    """
    files = list(files) or default_files()
    if not files:
        raise ValueError("no source files of the mixed suite's languages on this machine")
    points = plan_points(files, points_per_file, max_chars)
    if limit is not None:
        points = first_points(points, limit)
    if not points:
        raise ValueError("no lines to type in the given files")
    languages: dict[str, int] = {}
    for name in files:
        languages[language_id(name)] = languages.get(language_id(name), 0) + 1
    runs = _Configurations(
        model, threads, timeout_s, log_dir, variant, backend, paced=paced, jump=jump
    )
    print_plan(files, languages, points, runs.variant_label, threads, out)
    if backend is not None:
        out(f"  remote engine: {backend.label}")
    with tempfile.TemporaryDirectory(prefix="structspec-editor-") as tmp:
        trace = Path(tmp) / "trace.jsonl" if exactness else None
        if record is not None:
            trace = record.with_name(record.name + ".trace.jsonl")
            trace.unlink(missing_ok=True)  # the server appends
        results = runs.replay(points, trace, out)
        if contention > 0:
            results.update(runs.replay_loaded(points, contention, out))
        checked = None
        if trace is not None:
            checked = _check_and_record(model, threads, trace, exactness, record, out)
    loaded = runs.loaded_names(contention)
    n = report_results(results, len(points), loaded, _loops(contention), checked, model, out)
    remote = backend.report(out) if backend is not None else None
    return {
        "suite": "editor",
        "files": files,
        "model": n.model,
        "threads": threads,
        "points": len(points),
        "keystrokes": sum(len(p.typed) for p in points),
        "configs": n.summaries,
        "paced": n.paced,
        "jump": n.jump,
        "speculation_ratio": round(n.speculation_ratio, 2),
        "speculation_decode_ratio": round(n.speculation_decode_ratio, 2),
        "contention_ratio": round(n.contention_ratio, 2),
        "exactness": n.exactness,
        "remote": remote,
    }


class _Configurations:
    """The servers of one run: ``CONFIGS``, the variant, and their paced users."""

    def __init__(
        self,
        model: str,
        threads: int,
        timeout_s: float,
        log_dir: Path | None,
        variant: dict[str, Any] | None,
        backend: RemoteEngine | None,
        *,
        paced: bool,
        jump: bool = False,
    ) -> None:
        self.model, self.threads, self.timeout_s, self.log_dir = model, threads, timeout_s, log_dir
        self.paced, self.jump = paced, jump
        self.variants = [(variant_name("structspec", variant), variant)] if variant else []
        self.variant_label = self.variants[0][0] if self.variants else None
        self.configs = [*CONFIGS, *self.variants]
        # The ones replayed again under contention: the defaults and the variant.
        self.loaded_configs = [("structspec", {}), *self.variants]
        self.paced_configs = [(PACED, {}), *((variant_name(PACED, v), v) for _, v in self.variants)]
        self.backend = backend
        if backend is not None:
            self.configs.append((REMOTE, backend.options))
            self.paced_configs.append((REMOTE_PACED, backend.options))

    def server(
        self, name: str, options: dict[str, Any], *, paced: bool = False, trace: Path | None = None
    ) -> ReplayedServer:
        make: Callable[..., ReplayedServer] = ReplayedServer
        if self.backend is not None and name in (REMOTE, REMOTE_PACED):
            make = self.backend.server
        return make(
            name,
            options,
            self.model,
            self.threads,
            self.timeout_s,
            trace,
            self.log_dir,
            paced=paced,
        )

    def replay(
        self, points: Sequence[Point], trace: Path | None, out: Out
    ) -> dict[str, ConfigResult]:
        """Every configuration (the defaults traced), quiet; their results by name."""
        replays = [
            self.server(name, options, trace=trace if not options else None)
            for name, options in self.configs
        ]
        if self.paced:
            replays += [
                self.server(name, options, paced=True) for name, options in self.paced_configs
            ]
        if self.jump:
            replays.append(
                JumpServer(
                    points, JUMP, {}, self.model, self.threads, self.timeout_s, None, self.log_dir
                )
            )
        t0 = time.perf_counter()
        asyncio.run(_replay(replays, points, out))
        out(f"  replay done in {time.perf_counter() - t0:.1f} s")
        return {r.name: r.result for r in replays}

    def replay_loaded(
        self, points: Sequence[Point], contention: int, out: Out
    ) -> dict[str, ConfigResult]:
        """The defaults and the variant again, on fresh servers, with busy loops running."""
        loops = _loops(contention)
        loaded = [
            self.server(f"{name} + {loops}", options) for name, options in self.loaded_configs
        ]
        if self.paced:
            loaded += [
                self.server(f"{name} + {loops}", options, paced=True)
                for name, options in self.paced_configs
            ]
        t0 = time.perf_counter()
        with busy_loops(contention):
            asyncio.run(_replay(loaded, points, out))
        out(f"  loaded replay done in {time.perf_counter() - t0:.1f} s")
        return {r.name: r.result for r in loaded}

    def loaded_names(self, contention: int) -> list[tuple[str, str]]:
        """``(quiet name, loaded name)`` of each configuration replayed under contention."""
        if contention <= 0:
            return []
        return [(name, f"{name} + {_loops(contention)}") for name, _ in self.loaded_configs]


def _loops(n: int) -> str:
    return f"{n} busy loop{'s' if n != 1 else ''}"


def _check_and_record(
    model: str, threads: int, trace: Path, exactness: bool, record: Path | None, out: Out
) -> tuple[Exactness, int] | None:
    """The teacher-forced check of the trace (when asked) and the recording (when asked)."""
    from structspec.runtime import open_model

    checker = open_model(model, context_size=Settings().context_size, threads=threads)
    checked = None
    if exactness:
        t0 = time.perf_counter()
        checked = check_trace(checker, trace)
        out(f"  teacher-forced check done in {time.perf_counter() - t0:.1f} s")
    if record is not None:
        write_recording(checker, trace, record, threads, out)
    return checked
