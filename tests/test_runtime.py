"""The composition root's cost table: measured alone, or not cached."""

from __future__ import annotations

from pathlib import Path

import pytest

from structspec.engine.control import CostModel
from structspec.model.threads import IdleMeter
from structspec.runtime import QUIET_OTHER_CORES, measure_alone

TABLE = CostModel((1.0, 2.0))


def stat_line(idle: int, total: int) -> str:
    """A ``/proc/stat`` first line: ``idle`` of ``total`` jiffies idle (user time the rest)."""
    return f"cpu  {total - idle} 0 0 {idle} 0 0 0 0 0 0\n"


def measured(tmp_path: Path, idle_after: int, total_after: int, own_cores: float) -> float | None:
    """What ``measure_alone`` says when this process used ``own_cores`` over one second."""
    stat = tmp_path / "stat"
    stat.write_text(stat_line(1_000, 2_000))
    meter = IdleMeter(str(stat), cores=2)
    clock = {"wall": 0.0, "cpu": 0.0}

    def measure() -> CostModel:
        stat.write_text(stat_line(idle_after, total_after))  # the machine meanwhile
        clock["wall"] += 1.0
        clock["cpu"] += own_cores
        return TABLE

    cost, others = measure_alone(
        measure, meter, wall_clock=lambda: clock["wall"], cpu_clock=lambda: clock["cpu"]
    )
    assert cost is TABLE
    return others


def test_a_busy_machine_is_seen(tmp_path: Path):
    # 10 of 200 jiffies idle on 2 cores: 1.9 cores busy, 1.0 of them ours.
    others = measured(tmp_path, 1_010, 2_200, own_cores=1.0)
    assert others == pytest.approx(0.9) and others > QUIET_OTHER_CORES


def test_our_own_work_is_not_contention(tmp_path: Path):
    # The measurement itself keeps both cores busy: nothing is left for others.
    others = measured(tmp_path, 1_000, 2_200, own_cores=2.0)
    assert others == 0.0


def test_an_idle_machine_is_quiet(tmp_path: Path):
    others = measured(tmp_path, 1_200, 2_200, own_cores=0.0)  # all idle
    assert others is not None and others <= QUIET_OTHER_CORES


def test_unknown_idle_time_is_unknown(tmp_path: Path):
    meter = IdleMeter(str(tmp_path / "missing"), cores=2)
    assert measure_alone(lambda: TABLE, meter) == (TABLE, None)
