"""The thread governor: fewer threads while other processes hold the cores, all when free."""

from __future__ import annotations

from pathlib import Path

from structspec.model.threads import (
    CONTENDED_SHARE,
    RECHECK_S,
    RETRY_S,
    WINDOW,
    CallingThread,
    IdleMeter,
    ThreadGovernor,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def decodes(gov: ThreadGovernor, share: float, n: int = WINDOW, wall: float = 0.05) -> None:
    for _ in range(n):
        threads = gov.next_threads()
        gov.observe(threads, wall, wall * threads * share)


def test_a_quiet_machine_keeps_every_thread() -> None:
    gov = ThreadGovernor(2, idle=lambda: 0.0, clock=Clock())
    decodes(gov, 0.98, n=50)
    assert gov.next_threads() == 2


def test_contention_drops_to_the_cores_the_threads_got_and_idle_cores_bring_them_back() -> None:
    clock = Clock()
    idle = [0.1]
    gov = ThreadGovernor(2, idle=lambda: idle[0], clock=clock)
    decodes(gov, 0.45, n=WINDOW - 1)
    assert gov.next_threads() == 2  # not enough evidence yet
    decodes(gov, 0.45, n=1)
    assert gov.next_threads() == 1
    decodes(gov, 1.0, n=20)  # one thread says nothing about the other core
    clock.now += RECHECK_S
    assert gov.next_threads() == 1  # the machine is still busy
    idle[0] = 1.6
    clock.now += RECHECK_S / 2
    assert gov.next_threads() == 1  # looked too recently
    clock.now += RECHECK_S
    assert gov.next_threads() == 2


def test_eight_threads_getting_half_their_cores_run_on_four() -> None:
    gov = ThreadGovernor(8, idle=lambda: None, clock=Clock())
    decodes(gov, 0.5)
    assert gov.next_threads() == 4


def test_short_decodes_and_bad_readings_are_ignored() -> None:
    gov = ThreadGovernor(2, idle=lambda: None, clock=Clock())
    decodes(gov, 0.1, n=20, wall=0.001)  # shorter than MIN_WALL_S
    for _ in range(20):
        gov.observe(2, 0.05, -1.0)
    gov.observe(1, 0.05, 0.01)  # not the current thread count
    assert gov.next_threads() == 2
    assert ThreadGovernor(1).next_threads() == 1
    one = ThreadGovernor(1, idle=lambda: 0.0, clock=Clock())
    decodes(one, 0.1)
    assert one.next_threads() == 1  # one thread has no barrier to stall


def test_unknown_idle_time_retries_every_thread_after_a_while() -> None:
    clock = Clock()
    gov = ThreadGovernor(2, idle=lambda: None, clock=clock)
    decodes(gov, CONTENDED_SHARE / 2)
    assert gov.next_threads() == 1
    clock.now += RETRY_S - 0.5
    assert gov.next_threads() == 1
    clock.now += 1.0
    assert gov.next_threads() == 2


def test_idle_meter_reads_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    meter = IdleMeter(str(stat), cores=2)
    stat.write_text("cpu  200 0 100 900 0 0 0 0 0 0\n")  # half the new time idle
    assert meter.idle_cores() == 1.0
    assert meter.idle_cores() is None  # nothing moved
    stat.write_text("garbage\n")
    assert meter.idle_cores() is None
    assert IdleMeter(str(tmp_path / "missing")).idle_cores() is None


class Idents:
    """A scripted ``threading.get_ident``."""

    def __init__(self) -> None:
        self.now = 1

    def __call__(self) -> int:
        return self.now


def test_decodes_from_the_first_thread_are_never_a_move():
    idents = Idents()
    calling = CallingThread(idents)
    assert not any(calling.moved() for _ in range(5))
    assert calling.first == 1


def test_the_first_decode_from_a_second_thread_is_told_once():
    idents = Idents()
    calling = CallingThread(idents)
    assert not calling.moved()  # the first decode: its thread's team is the model's
    idents.now = 2
    assert calling.moved()  # a second thread: a second OpenMP team
    assert not calling.moved()  # told once
    idents.now = 3
    assert not calling.moved()
