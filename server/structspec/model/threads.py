"""Threads for llama.cpp under CPU contention: all of them when the cores are free, fewer when not.

llama.cpp's CPU threads meet at a barrier after every operation of a graph, and
wait there spinning. When another process takes a core, the thread that lost
it holds every other thread at the next barrier until the scheduler gives it
back, so a pass on ``n`` threads becomes several times slower than the same
pass on fewer threads (measured in ``docs/MEASUREMENTS.md``, "Threads under
contention"). An editor shares its machine with builds and browsers, so the
thread count follows the machine:

- **Contention seen.** After each decode the governor compares the process'
  CPU time with the wall time the decode took on ``n`` threads: the share of
  ``n`` cores the threads actually got. When the recent median share is below
  ``CONTENDED_SHARE``, the next decodes run on the cores the threads did get
  (at least one).
- **Cores free again.** While on fewer threads it reads the machine's idle
  time (``/proc/stat`` on Linux) every ``RECHECK_S``; when enough cores are
  idle for all the threads, it goes back to all of them. Where the idle time
  cannot be read, it tries all the threads again after ``RETRY_S``.

Decodes shorter than ``MIN_WALL_S`` say little (timer and scheduling noise)
and are not counted.

One thread for llama.cpp's calls
--------------------------------
llama-cpp-python's llama.cpp is built with OpenMP (libgomp): every graph runs
in an ``omp parallel`` region and every barrier between its operations is an
``omp barrier``. libgomp keeps one thread team per thread that opens such a
region, for as long as that thread lives, and counts the teams' threads
together: once they outnumber the cores it stops spinning at barriers (a few
hundred loops instead of 300,000) and parks the waiting thread in the kernel.
A model loaded and measured on one thread and decoded on another (the HTTP
server's main thread, then its worker) leaves an idle team behind; on two
cores that makes the count 3 > 2, so every barrier of every pass, hundreds per
pass, sleeps and wakes through a futex. Passes get slower, the process gets
less of its cores, and the governor above reads that as contention and drops
to one thread (``docs/MEASUREMENTS.md``, "One thread for llama.cpp's calls":
about 590 voluntary context switches per verification pass instead of none).
So whatever drives a model makes all its llama.cpp calls on one thread: the
language server and the HTTP server load it on their engine's worker thread.
``CallingThread`` tells, once, when a multi-threaded decode comes from a
second thread, so that an arrangement that slips is seen.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable

#: Below this share of its cores, a decode on several threads was contended.
CONTENDED_SHARE = 0.7
#: Decodes whose shares are compared (the median decides).
WINDOW = 3
#: Decodes shorter than this (seconds) are not counted.
MIN_WALL_S = 0.004
#: Seconds between two looks at the machine's idle time while on fewer threads.
RECHECK_S = 1.0
#: Seconds on fewer threads before trying all of them when idle time is unknown.
RETRY_S = 10.0
#: Idle cores needed per thread to add back (a little under one: our own work shows as busy).
IDLE_PER_THREAD = 0.8


class IdleMeter:
    """Idle cores of the machine between two calls, from ``/proc/stat`` (``None``: unknown)."""

    def __init__(self, path: str = "/proc/stat", cores: int = 1) -> None:
        self.path = path
        self.cores = max(1, cores)
        self._last: tuple[float, float] | None = self._read()

    def _read(self) -> tuple[float, float] | None:
        try:
            with open(self.path, encoding="ascii") as f:
                fields = f.readline().split()
        except OSError:
            return None
        if len(fields) < 5 or fields[0] != "cpu":
            return None
        try:
            values = [float(v) for v in fields[1:]]
        except ValueError:
            return None
        idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
        return idle, sum(values[:8])

    def idle_cores(self) -> float | None:
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return self.cores * (now[0] - last[0]) / (now[1] - last[1])


class ThreadGovernor:
    """Chooses the thread count of each decode (see the module docstring)."""

    def __init__(
        self,
        most: int,
        idle: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.most = max(1, most)
        self.threads = self.most
        self._idle = idle
        self._clock = clock
        self._shares: deque[float] = deque(maxlen=WINDOW)
        self._since = 0.0  # when the thread count last went down
        self._checked = 0.0

    def next_threads(self) -> int:
        """Threads for the next decode."""
        if self.threads < self.most:
            now = self._clock()
            if now - self._checked >= RECHECK_S:
                self._checked = now
                idle = self._idle() if self._idle is not None else None
                wanted = (self.most - self.threads) * IDLE_PER_THREAD
                unknown_for_long = idle is None and now - self._since >= RETRY_S
                if unknown_for_long or (idle is not None and idle >= wanted):
                    self.threads = self.most
                    self._shares.clear()
        return self.threads

    def observe(self, threads: int, wall_s: float, cpu_s: float) -> None:
        """A decode on ``threads`` took ``wall_s`` and the process used ``cpu_s`` of CPU."""
        if threads < 2 or threads != self.threads or wall_s < MIN_WALL_S or cpu_s < 0:
            return
        self._shares.append(cpu_s / (wall_s * threads))
        if len(self._shares) < self._shares.maxlen:  # type: ignore[operator]
            return
        share = statistics.median(self._shares)
        if share < CONTENDED_SHARE:
            self.threads = max(1, min(threads - 1, int(share * threads)))
            self._shares.clear()
            self._since = self._checked = self._clock()


class CallingThread:
    """The thread of a model's first multi-threaded decode (whose OpenMP team it uses).

    ``moved()`` is true once: at the first decode from another thread (see
    "One thread for llama.cpp's calls" in the module docstring).
    """

    def __init__(self, ident: Callable[[], int] = threading.get_ident) -> None:
        self._ident = ident
        self.first: int | None = None
        self._told = False

    def moved(self) -> bool:
        """Record the calling thread; true the first time it is not the first one's."""
        now = self._ident()
        if self.first is None:
            self.first = now
            return False
        if now == self.first or self._told:
            return False
        self._told = True
        return True
