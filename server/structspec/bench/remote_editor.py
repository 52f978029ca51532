"""The editor benchmark through a remote engine: ``--backend URL`` or ``--llama-server BIN``.

Beside the local engine's configurations, the same points are typed through
a language server whose ``backend`` setting names a remote engine: ``remote``
(the sequential user) and ``remote, paced`` (the paced one, whose unanswered
requests are cancelled at the next key). Their keystroke latencies are in the
editor report's tables like any configuration's; what only the engine can
tell is read from llama-server's own log (``EngineLog``):

- *engine requests*: the tasks the server started while a line was typed
  (``processing task``; a task cancelled while still queued counts too), per
  keystroke typed. Typing through a suggestion on screen, the debounce and
  cancellation before the request is sent keep this below 1;
- *closed while generating*: tasks the server cancelled because the language
  server closed the stream (``cancel task``: a new keystroke, or a cut by the
  line policy or a budget);
- *kept generating*: of those, the ones that went on decoding after the
  cancel (``kept_generating``). Must be 0: a closed stream stops the server's
  work. llama.cpp cannot stop a pass midway, so the pass in flight when the
  cancel comes may still end the task normally (its timings printed after the
  cancel, a stop string met by its one token): that is not counted, only more
  generation than that pass, timed by the log's timestamps. With speculation
  one pass verifies a whole draft (``--spec-type``: up to 64 tokens), so the
  time of a pass is the generation's time over its passes, not its tokens.

A closed connection the server never noticed would not be in its log at all;
llama-server polls the connection while it generates (its HTTP layer's
``is_connection_closed``), so every close of a running stream is logged.

``--llama-server BIN`` starts one (``bench/llama_server.py``) on the
benchmark's model and threads, with the set-up the README recommends
(``--spec-type ngram-mod``, ``--cache-reuse 256``), logging to a file read
here. ``--backend URL`` takes a running engine of any protocol; only with
``--backend-log FILE`` (llama-server's ``--log-file``) are its requests counted.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from structspec.bench.llama_server import LlamaServerBaseline
from structspec.bench.points import Point
from structspec.bench.typist import Out, ReplayedServer

#: The configurations typed through the remote engine (sequential, paced).
REMOTE = "remote"
REMOTE_PACED = "remote, paced"
#: The llama-server mode started by ``--llama-server``: the README's set-up.
STARTED_MODE = "llama-server:ngram-mod"
STARTED_ARGS = ("--cache-reuse", "256")

#: llama-server's log lines (``server-context.cpp``, ``server-queue.cpp``).
_STARTED = re.compile(rb"\| task (\d+) \| processing task")
_CANCELLED = re.compile(rb"cancel task, id_task = (\d+)")
#: Printed after a speculative task's timings: its draft tokens accepted.
_DRAFTS = re.compile(rb"\| task (\d+) \| draft acceptance = [\d.]+ \(\s*(\d+) accepted")
_FINISHED = re.compile(rb"\| task (\d+) \|\s+eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
#: The log's timestamp (``--log-timestamps``, on by default): minutes.seconds.ms.us.
_TIMESTAMP = re.compile(rb"^(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) ")


def _seconds(line: bytes) -> float | None:
    m = _TIMESTAMP.match(line)
    if m is None:
        return None
    return int(m[1]) * 60 + int(m[2]) + int(m[3]) / 1e3 + int(m[4]) / 1e6


def kept_generating(
    cancelled_at: float | None,
    finished_at: float | None,
    eval_ms: float,
    tokens: int,
    accepted: int = 0,
) -> bool:
    """Did a task that finished after its cancel go on decoding past the pass in flight?

    Its first token comes out of the prompt's evaluation: one token, no decode
    pass after it. The ``tokens - 1`` after it came from passes that each
    wrote one token plus the draft tokens it accepted, so there were
    ``tokens - 1 - accepted`` passes (at least one: a stop may cut accepted
    tokens off). The generation after the cancel (from the later of the cancel
    and the generation's start) is compared with two passes' time; without
    timestamps any decode pass counts.
    """
    if tokens <= 1:
        return False
    if cancelled_at is None or finished_at is None:
        return True
    per_pass = eval_ms / 1000.0 / max(1, tokens - 1 - accepted)
    after = finished_at - max(cancelled_at, finished_at - eval_ms / 1000.0)
    return after > 2 * per_pass


@dataclass(frozen=True)
class EngineTasks:
    """What llama-server's log says of the tasks started in some spans of it."""

    requests: int = 0
    closed: int = 0
    kept_generating: int = 0


class EngineLog:
    """llama-server's log file, read by byte offset (it flushes each line)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def position(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def tasks(self, spans: list[tuple[int, int]]) -> EngineTasks:
        """The tasks first seen (started, or cancelled while queued) inside ``spans``.

        A cancel or a finish is matched to its task wherever it is in the log:
        the server writes them after the span that started the task, maybe.
        """
        if not self.path.is_file():  # a running engine that has not written it yet
            return EngineTasks()
        first_seen: dict[int, int] = {}
        cancelled: dict[int, float | None] = {}  # task: when
        finished: dict[int, tuple[float | None, float, int]] = {}  # task: when, eval ms, tokens
        accepted: dict[int, int] = {}  # task: draft tokens accepted (printed after its timings)
        offset = 0
        with self.path.open("rb") as fh:
            for line in fh:
                if m := _STARTED.search(line):
                    first_seen.setdefault(int(m[1]), offset)
                elif m := _CANCELLED.search(line):
                    first_seen.setdefault(int(m[1]), offset)
                    cancelled[int(m[1])] = _seconds(line)
                elif m := _FINISHED.search(line):
                    finished[int(m[1])] = (_seconds(line), float(m[2]), int(m[3]))
                elif m := _DRAFTS.search(line):
                    accepted[int(m[1])] = int(m[2])
                offset += len(line)
        kept = {
            task
            for task, when in cancelled.items()
            if task in finished and kept_generating(when, *finished[task], accepted.get(task, 0))
        }
        mine = {t for t, at in first_seen.items() if any(a <= at < b for a, b in spans)}
        return EngineTasks(len(mine), len(mine & cancelled.keys()), len(mine & kept))


class RemoteReplayedServer(ReplayedServer):
    """A replayed server completing through the engine; it marks where its lines are typed."""

    def __init__(self, *args: Any, log: EngineLog | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log = log
        self.spans: list[tuple[int, int]] = []
        self._typing_from = 0

    async def type_point(self, point: Point) -> None:
        self._typing_from = self.log.position() if self.log else 0
        await super().type_point(point)

    async def type_point_paced(self, point: Point) -> None:
        self._typing_from = self.log.position() if self.log else 0
        await super().type_point_paced(point)

    async def run_point(self, point: Point) -> None:
        # To the end of the turn (its settle): the log's lines of the last
        # keystrokes are written by then.
        await super().run_point(point)
        if self.log is not None:
            self.spans.append((self._typing_from, self.log.position()))

    def keystrokes(self) -> int:
        return sum(len(p.keys) for p in self.result.paced) if self.paced else len(self.result.keys)


@dataclass
class RemoteEngine:
    """The remote engine of one run: its URL, its log, the servers typed through it."""

    url: str
    label: str
    log: EngineLog | None = None
    servers: list[RemoteReplayedServer] = field(default_factory=list)

    @property
    def options(self) -> dict[str, Any]:
        """The remote configurations' settings (LSP spelling, ``initializationOptions``)."""
        return {"backend": self.url}

    def server(self, name: str, *args: Any, **kwargs: Any) -> RemoteReplayedServer:
        """A replayed server through this engine (``ReplayedServer``'s arguments)."""
        server = RemoteReplayedServer(name, *args, log=self.log, **kwargs)
        self.servers.append(server)
        return server

    def report(self, out: Out) -> dict[str, Any]:
        """Print the engine's side of the remote configurations; the numbers printed."""
        out(f"through the remote engine ({self.label}):")
        if self.log is None:
            out("  engine requests not counted: no log of the engine (--backend-log FILE)")
            return {"backend": self.label}
        width = max((len(s.name) for s in self.servers), default=len("configuration"))
        out(
            f"{'configuration':<{width}}  keys  engine requests  per keystroke  "
            "closed while generating  kept generating"
        )
        numbers: dict[str, Any] = {"backend": self.label}
        for s in self.servers:
            tasks = self.log.tasks(s.spans)
            keys = s.keystrokes()
            per_key = tasks.requests / keys if keys else 0.0
            out(
                f"{s.name:<{width}}  {keys:4d}  {tasks.requests:15d}  {per_key:13.2f}  "
                f"{tasks.closed:23d}  {tasks.kept_generating:15d}"
            )
            numbers[s.name] = {**vars(tasks), "keystrokes": keys, "per_keystroke": per_key}
        out(
            "(read from llama-server's log while the lines were typed: engine requests, its "
            "tasks, target well below 1 per keystroke; closed while generating, the streams "
            "the language server closed that the server cancelled; kept generating, those "
            "that went on decoding past the pass in flight at the cancel, target 0)"
        )
        return numbers


@contextlib.contextmanager
def started_llama_server(
    binary: str, model_path: str, threads: int, n_ctx: int, log_dir: Path | None
) -> Iterator[RemoteEngine]:
    """llama-server started on ``model_path`` for the run, logging to a file read after it."""
    with contextlib.ExitStack() as stack:
        if log_dir is None:
            log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="structspec-")))
        server = LlamaServerBaseline(
            binary, STARTED_MODE, model_path, threads, n_ctx, log_dir, extra_args=STARTED_ARGS
        )
        stack.callback(server.close)
        label = (
            f"llama-server at {server.url}, --spec-type ngram-mod {' '.join(STARTED_ARGS)}, "
            f"{threads} thread(s)"
        )
        log = EngineLog(server.log_path) if server.log_path else None
        yield RemoteEngine(server.url, label, log)


def running_engine(url: str, log: str | None) -> RemoteEngine:
    """A running engine at ``url``; its requests are counted from ``log`` (llama-server's)."""
    return RemoteEngine(url, url, EngineLog(Path(log)) if log else None)
