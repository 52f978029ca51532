"""``structspec benchmark``: decoding modes side by side on the same prompts, in one run.

``--temperature`` above 0 (with ``--top-k``, ``--top-p``, ``--min-p``,
``--seed``, the flags of ``structspec run``) benchmarks sampling: every mode
samples with those parameters, ``greedy`` becoming plain sampling (no drafts),
the base of the speed ratios (``bench/harness.py``). Sampled output has no
argmax to check, so the teacher-forced exactness check gives way to a pointer
to the tests that prove the distribution (``bench/report.py``: ``SAMPLING_PROOF``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from structspec.bench import EXTRA_INSTALL, missing_extra
from structspec.bench.harness import MODES, SERVE_MODE, ablation_sources, is_llama_server_mode
from structspec.bench.llama_server import SPEC_TYPES, spec_type
from structspec.bench.suites import SuiteError, load_suite
from structspec.commands.common import (
    add_model_arguments,
    add_sampling_arguments,
    check_writable,
    sampling_from_args,
    settings_from_args,
)
from structspec.config import SOURCE_NAMES, resolve_sources
from structspec.errors import UserError

if TYPE_CHECKING:
    from structspec.bench.remote_editor import RemoteEngine
    from structspec.bench.suites import Prompt
    from structspec.config import Settings
    from structspec.engine.sampling import Sampling

#: The suites whose prompts the modes decode side by side (the others replay an
#: editor or fill single lines, greedily).
SAMPLED_SUITES = "humaneval, mixed and jsonl:PATH"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "benchmark", help="compare greedy, structspec and llama-cpp PLD side by side"
    )
    p.add_argument(
        "--suite",
        default="humaneval",
        help="humaneval (default), mixed, editor, infill, shapes (model shapes with random "
        "weights: speed only), or jsonl:PATH",
    )
    add_model_arguments(p)
    p.add_argument(
        "--shape",
        action="append",
        help="shapes suite: a model shape to build and measure (repeatable; default: all)",
    )
    p.add_argument("--quantize", help="shapes suite: llama.cpp's llama-quantize (default: on PATH)")
    p.add_argument("--limit", type=int, help="first N prompts only (editor: N cursor points)")
    p.add_argument(
        "--before-chars",
        type=int,
        default=7000,
        help="infill: characters of a real file kept before the cleared line "
        "(default 7000, about 2,000 tokens; 16000 is about 4,000)",
    )
    p.add_argument(
        "--arrivals",
        default="cold,prewarmed,plain,restart",
        help="infill: how the user arrives at each line before its first request, "
        "comma-separated, taken in turn over the lines (default cold,prewarmed,plain,restart; "
        "also highlight: a client that asks for highlights where the cursor rests; "
        "one name: every line so)",
    )
    p.add_argument(
        "--idle-s",
        type=float,
        default=3.0,
        help="infill: seconds the user rests at the line before asking, in the prewarmed, "
        "plain, highlight and restart arrivals (default 3)",
    )
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per prompt (default 128)")
    add_sampling_arguments(p)  # temperature > 0: every mode samples, greedy is plain sampling
    p.add_argument("--repeat", type=int, default=1, help="runs per prompt and mode (default 1)")
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated: greedy (no drafts; with --temperature: plain sampling), "
        "structspec,pld, structspec:NAME+NAME for "
        "structspec with only those draft sources (an ablation, e.g. structspec:lookup+rules), "
        "and with --llama-server: llama-server (greedy) and llama-server:TYPE "
        "(its --spec-type TYPE, e.g. llama-server:ngram-mod); serve: structspec serve "
        "over HTTP, in a subprocess",
    )
    p.add_argument(
        "--rest",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds of rest before every request of the side-by-side suites (default 0)",
    )
    p.add_argument(
        "--llama-server",
        metavar="PATH",
        help="llama.cpp's llama-server binary for the llama-server modes "
        "(tools/build-llama-server.sh builds one); editor suite: started on the model "
        "and typed through as the remote engine, its log read",
    )
    p.add_argument(
        "--backend",
        metavar="URL",
        help="editor suite: also type through a language server completing through this "
        "running engine (the `backend` setting: llama-server, OpenAI-compatible, Ollama)",
    )
    p.add_argument(
        "--backend-log",
        metavar="FILE",
        help="editor suite with --backend: the engine's log (llama-server --log-file FILE), "
        "read for its requests per keystroke and cancelled requests",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw per-prompt speed ratios and acceptance by draft position",
    )
    p.add_argument(
        "--no-exactness",
        action="store_true",
        help="skip the teacher-forced exactness check (never run when sampling)",
    )
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="measure the verification cost table again before running",
    )
    p.add_argument(
        "--files",
        help="editor suite: glob of source files to type through (default: real files of "
        "several languages found on the machine, none of this project's)",
    )
    p.add_argument(
        "--contention",
        type=int,
        default=0,
        metavar="N",
        help="editor suite: replay structspec again with N busy-loop processes running",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="editor suite: also type with this setting changed (LSP spelling, e.g. "
        "debounceMs=0; repeat for several), sequential and paced, in turn with the defaults",
    )
    p.add_argument(
        "--server-logs",
        metavar="DIR",
        help="editor suite: each language server writes its log to DIR/<configuration>.log "
        "(one line per model answer: prompt evaluation and decode times)",
    )
    p.add_argument("--json-out", help="write per-prompt, per-mode tokens and stats as JSON")
    p.add_argument("--trace-csv", help="write one row per verification pass")
    p.add_argument("--markdown-out", help="write the report as Markdown (docs/BENCHMARKS.md)")
    p.add_argument(
        "--record",
        metavar="OUT",
        help="decode the suite greedily and write a recording for --replay (no other output); "
        "editor suite: the structspec server's generations as a recording, after the report",
    )
    p.add_argument(
        "--replay",
        metavar="RECORDING",
        nargs="+",
        help="run recordings through the planner and sources: predicted speed-up and a hash "
        "of every pass, without decoding",
    )
    p.add_argument(
        "--oracle",
        action="store_true",
        help="with --replay: also replay with a control that knows which draft tokens the "
        "model accepts (the bound for the planner over the same sources)",
    )
    p.add_argument(
        "--orders",
        action="store_true",
        help="with --replay: also replay the planner with the prompts in three more orders "
        "(reversed, even then odd, rotated by half): its statistics carry from prompt to prompt",
    )
    p.add_argument(
        "--cost-table",
        metavar="FILE",
        help="with --replay: plan and predict with this cost table instead of the recording's "
        "(a file of ~/.cache/structspec/cost/, or a JSON list of ms per pass of 1, 2, ... rows)",
    )
    p.set_defaults(func=run)


def _valid_ablation(mode: str) -> bool:
    names = ablation_sources(mode)
    if not names:
        return False
    try:
        resolve_sources(names)
    except ValueError:
        return False
    return True


def _command_line() -> str:
    return "structspec " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _valid_llama_server(mode: str) -> bool:
    if not is_llama_server_mode(mode):
        return False
    try:
        spec_type(mode)
    except ValueError:
        return False
    return True


def _sampled_elsewhere(args: argparse.Namespace) -> str | None:
    """What refuses sampling in this invocation (``None``: nothing)."""
    if args.replay:
        return "--replay (a recording is of greedy decoding)"
    if args.record:
        return "--record (a recording is of greedy decoding)"
    if args.suite in ("editor", "infill"):
        return f"the {args.suite} suite (greedy; sampling is benchmarked on {SAMPLED_SUITES})"
    return None


def _run_shapes(args: argparse.Namespace) -> int:
    """The model-shapes suite (``bench/shapes.py``) with this command's options."""
    from structspec.bench import shapes

    argv = [f"--shape={name}" for name in args.shape or []]
    for flag, value in (
        ("--quantize", args.quantize),
        ("--threads", args.threads),
        ("--json-out", args.json_out),
        ("--markdown-out", args.markdown_out),
    ):
        if value:
            argv.append(f"{flag}={value}")
    options = shapes.parser(prog="structspec benchmark --suite shapes").parse_args(argv)
    return shapes.run_shapes(options, "structspec benchmark " + shlex.join(sys.argv[2:]))


#: Image formats ``--plot`` writes (matplotlib's, by the file's extension).
PLOT_FORMATS = frozenset({".png", ".svg", ".pdf", ".jpg", ".jpeg", ".webp", ".eps"})


def _check_bench_extra() -> None:
    """One line naming what to install when the ``structspec[bench]`` extra is missing."""
    missing = missing_extra()
    if missing:
        raise UserError(
            f"structspec benchmark needs the bench extra ({', '.join(missing)} not installed): "
            f"{EXTRA_INSTALL}"
        )


def run(args: argparse.Namespace) -> int:
    _check_bench_extra()
    check_writable(args.json_out, args.trace_csv, args.markdown_out, args.plot)  # before the run
    if args.plot and Path(args.plot).suffix.lower() not in PLOT_FORMATS:
        raise UserError(f"--plot must name a {', '.join(sorted(PLOT_FORMATS))} file")
    sampling = sampling_from_args(args)
    refused = None if sampling.greedy else _sampled_elsewhere(args)
    if refused:
        raise UserError(f"--temperature {sampling.temperature} does not apply to {refused}")
    if args.replay:
        return _run_replay(args)
    if args.oracle:
        raise UserError("--oracle needs --replay RECORDING")
    if args.cost_table or args.orders:
        flag = "--cost-table" if args.cost_table else "--orders"
        raise UserError(f"{flag} needs --replay RECORDING")
    if args.suite == "editor":
        return _run_editor(args)
    if args.backend or args.backend_log:
        raise UserError("--backend and --backend-log apply to --suite editor only")
    if args.suite == "infill":
        return _run_infill(args)
    if args.suite == "shapes":
        return _run_shapes(args)
    modes = list(dict.fromkeys(m.strip() for m in args.modes.split(",") if m.strip()))
    known = (*MODES, SERVE_MODE)
    unknown = [
        m for m in modes if m not in known and not _valid_ablation(m) and not _valid_llama_server(m)
    ]
    if unknown or not modes:
        raise UserError(
            f"unknown mode(s) {', '.join(unknown) or '(none)'}; use {','.join(known)}, "
            f"structspec:SOURCE+SOURCE with sources from {', '.join(SOURCE_NAMES)}, all, "
            f"or llama-server[:TYPE] with TYPE from {', '.join(SPEC_TYPES)}"
        )
    server_modes = [m for m in modes if is_llama_server_mode(m)]
    if server_modes and not args.llama_server:
        raise UserError(f"{', '.join(server_modes)} need --llama-server PATH")
    if args.llama_server and not os.access(args.llama_server, os.X_OK):
        raise UserError(f"--llama-server {args.llama_server}: not an executable file")
    if args.repeat < 1 or args.max_tokens < 1 or (args.limit is not None and args.limit < 1):
        raise UserError("--repeat, --max-tokens and --limit must be positive")
    if not 0 <= args.rest <= 60:
        raise UserError("--rest must be between 0 and 60 seconds")
    try:
        prompts = load_suite(args.suite)
    except SuiteError as exc:
        raise UserError(str(exc)) from None
    if args.limit:
        prompts = prompts[: args.limit]

    settings = settings_from_args(args).settings
    if args.record:
        return _run_record(args, settings, prompts)
    return _run_suite(args, settings, modes, prompts, sampling)


def _run_suite(
    args: argparse.Namespace,
    settings: Settings,
    modes: list[str],
    prompts: list[Prompt],
    sampling: Sampling,
) -> int:
    """The modes side by side on the suite's prompts; the report and the files asked for."""
    from structspec.bench.report import SuiteRun, suite_report, write_json, write_trace
    from structspec.bench.side_by_side import RunOptions, run_side_by_side

    options = RunOptions(
        modes,
        args.max_tokens,
        args.repeat,
        sampling,
        exactness=not args.no_exactness,
        recalibrate=args.recalibrate,
        llama_server=args.llama_server,
        rest_s=args.rest,
    )
    result = run_side_by_side(settings, prompts, options)
    command = _command_line()
    run = SuiteRun(
        command,
        args.suite,
        args.max_tokens,
        args.repeat,
        settings.threads,
        result.model_name,
        prompts,
        modes,
        sampling,
        rest_s=args.rest,
    )
    report = suite_report(run, result.runs, result.summary)
    # The files first: a closed pipe on stdout (``| head``) must not lose them.
    if args.markdown_out:
        Path(args.markdown_out).write_text(report + "\n", encoding="utf-8")
    if args.json_out:
        write_json(
            args.json_out, command, prompts, result.prompt_tokens, result.runs, result.summary
        )
    if args.trace_csv:
        write_trace(args.trace_csv, result.runs)
    if args.plot:
        from structspec.bench.plot import plot

        plot(args.plot, result.runs, result.summary, modes, sampling)
    print(report)
    return 0


def _run_printed(
    args: argparse.Namespace, suite: str, title: str, run: Callable[[Callable[[str], None]], Any]
) -> int:
    """Run a suite that prints its report line by line; write its Markdown and JSON."""
    lines: list[str] = []

    def out(line: str) -> None:
        lines.append(line)
        if sys.stdout is not None:
            try:
                print(line, flush=True)
            except BrokenPipeError:  # ``| head``: the reader left; the files are still due
                sys.stdout = None

    try:
        result = run(out)
    except (OSError, ValueError) as exc:
        raise UserError(f"{suite} benchmark: {exc}") from None
    if args.markdown_out:
        from structspec.bench.report import lines_report

        text = lines_report(_command_line(), title, lines)
        Path(args.markdown_out).write_text(text, encoding="utf-8")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result), encoding="utf-8")
    return 0


def _run_infill(args: argparse.Namespace) -> int:
    from structspec.bench.infill import parse_arrivals, run_infill_benchmark

    if args.limit is not None and args.limit < 1:
        raise UserError("--limit must be positive")
    try:
        arrivals = parse_arrivals(args.arrivals)
    except ValueError as exc:
        raise UserError(f"--arrivals: {exc}") from None
    if args.before_chars < 1:
        raise UserError("--before-chars must be positive")
    if not 0.0 <= args.idle_s <= 600.0:  # (also false for nan)
        raise UserError("--idle-s must be between 0 and 600 seconds")
    settings = settings_from_args(args).settings
    return _run_printed(
        args,
        "infill",
        "single-line infilling",
        lambda out: run_infill_benchmark(
            settings.model,
            settings.threads,
            out=out,
            limit=args.limit or 40,
            before_chars=args.before_chars,
            arrivals=arrivals,
            idle_s=args.idle_s,
        ),
    )


def _run_editor(args: argparse.Namespace) -> int:
    import glob

    from structspec.bench.editor import run_editor_benchmark

    files = sorted(glob.glob(args.files, recursive=True)) if args.files else []
    if args.files and not files:
        raise UserError(f"no files match {args.files!r}")
    if args.contention < 0 or (args.limit is not None and args.limit < 1):
        raise UserError("--contention must be 0 or more and --limit positive")
    settings = settings_from_args(args).settings
    variant = _editor_variant(args.variant)
    logs = Path(args.server_logs) if args.server_logs else None
    if logs is not None:
        try:
            logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--server-logs {args.server_logs}: {exc.strerror or exc}") from None
    with _editor_backend(args, settings, logs) as backend:
        return _run_printed(
            args,
            "editor",
            "editor replay" + (", local and remote engine" if backend else ""),
            lambda out: run_editor_benchmark(
                files,
                settings.model,
                settings.threads,
                out=out,
                limit=args.limit,
                contention=args.contention,
                exactness=not args.no_exactness,
                log_dir=logs,
                record=Path(args.record) if args.record else None,
                variant=variant,
                backend=backend,
            ),
        )


@contextlib.contextmanager
def _editor_backend(
    args: argparse.Namespace, settings: Settings, logs: Path | None
) -> Iterator[RemoteEngine | None]:
    """The editor suite's remote engine: ``--backend URL``, one started by ``--llama-server``."""
    from structspec.bench.llama_server import LlamaServerError
    from structspec.bench.remote_editor import running_engine, started_llama_server
    from structspec.config import Settings, apply

    if args.backend_log and not args.backend:
        raise UserError("--backend-log needs --backend URL")
    if args.backend:
        if args.llama_server:
            raise UserError("--backend URL or --llama-server PATH, not both")
        _, _, errors = apply(Settings(), {"backend": args.backend}, camel_case=True)
        if errors:
            raise UserError(f"--backend: {'; '.join(errors)}")
        if args.backend_log and not Path(args.backend_log).is_file():
            raise UserError(f"--backend-log {args.backend_log}: not a file")
        yield running_engine(args.backend, args.backend_log)
        return
    if not args.llama_server:
        yield None
        return
    if not os.access(args.llama_server, os.X_OK):
        raise UserError(f"--llama-server {args.llama_server}: not an executable file")
    if settings.model.startswith("standin"):
        raise UserError("--llama-server needs a GGUF model, not the stand-in")
    from structspec.model.paths import default_model_path

    model = settings.model or str(default_model_path())
    with contextlib.ExitStack() as stack:
        try:
            engine = stack.enter_context(
                started_llama_server(
                    args.llama_server, model, settings.threads, settings.context_size, logs
                )
            )
        except LlamaServerError as exc:
            raise UserError(str(exc)) from None
        yield engine


def _editor_variant(items: list[str]) -> dict[str, Any]:
    """``--variant debounceMs=0`` as the server's ``initializationOptions``, checked here."""
    from structspec.config import Settings, apply

    variant: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name = key.strip()
        if not sep or not name:
            raise UserError(f"--variant {item!r}: write SETTING=VALUE, e.g. debounceMs=0")
        if name in variant:  # one variant: a second value would silently win
            raise UserError(f"--variant names {name} twice (the flags make one variant)")
        try:  # 0, false, "text": as a client sends them; anything else a string
            variant[name] = json.loads(value)
        except ValueError:
            variant[name] = value.strip()
    _, _, errors = apply(Settings(), variant, camel_case=True)
    if errors:
        raise UserError(f"--variant: {'; '.join(errors)}")
    return variant


def _run_record(args: argparse.Namespace, settings: Any, prompts: list) -> int:
    from structspec.bench.recording import record
    from structspec.runtime import cost_model_for, open_model

    model = open_model(
        settings.model,
        context_size=settings.context_size,
        threads=settings.threads,
        widen=settings.widen_weights,
    )
    cost = cost_model_for(model)
    rec = record(
        model,
        ((p.id, p.language, model.tokenize(p.prompt)) for p in prompts),
        max_tokens=args.max_tokens,
        cost_ms=cost.ms,
        threads=settings.threads,
    )
    try:
        Path(args.record).write_text(rec.to_json(), encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {args.record}: {exc}") from None
    print(f"recorded {len(rec.prompts)} prompts to {args.record}")
    return 0


def _run_replay(args: argparse.Namespace) -> int:
    """Replay recordings through the planner and sources; exit 1 when an output differs."""
    from structspec.bench.recording import Recording, ReplayError, load_cost_table
    from structspec.bench.replay_report import replay_and_report, replay_markdown
    from structspec.runtime import assemble_engine, open_model

    try:
        recordings = [(path, Recording.load(path)) for path in args.replay]
        cost = load_cost_table(args.cost_table) if args.cost_table else None
    except ReplayError as exc:
        raise UserError(str(exc)) from None
    settings = settings_from_args(args).settings
    vocab = open_model(settings.model, context_size=256, threads=1, widen=False)  # tokenizer only
    for path, recording in recordings:
        if vocab.name != recording.model:
            raise UserError(f"{path}: the recording is of {recording.model}, not {vocab.name}")
    done = replay_and_report(
        recordings,
        vocab,
        lambda model, cost: assemble_engine(model, settings, cost),
        limit=args.limit,
        oracle=args.oracle,
        orders=args.orders,
        cost=cost,
        cost_table=args.cost_table,
    )
    if args.markdown_out:
        text = replay_markdown(_command_line(), done.rows, done.by_order or None)
        Path(args.markdown_out).write_text(text, encoding="utf-8")
    return 1 if done.failed else 0
