"""The composition root's cost table: measured alone, or not cached."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from structspec import runtime
from structspec.engine.control import CostModel
from structspec.model.standin import StandInModel
from structspec.model.threads import IdleMeter
from structspec.rates import Rates
from structspec.runtime import QUIET_OTHER_CORES, RATES_SAMPLES, measure_alone

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


# -- the model's rates (``model_rates``), measured once and cached ----------


class FileStandIn(StandInModel):
    """The stand-in posing as a GGUF model (``GGUFModel``): a file, threads and a head."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.weights = path
        self.threads = 2
        self.head = "llama.cpp"

    def metadata(self, key: str) -> str | None:
        return None

    def chat_template(self) -> str | None:
        return None

    def close(self) -> None:
        pass


@pytest.fixture
def gguf_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FileStandIn:
    monkeypatch.setenv("STRUCTSPEC_CACHE_DIR", str(tmp_path / "cache"))
    file = tmp_path / "model.gguf"
    file.write_bytes(b"GGUF")
    return FileStandIn(file)


def counted_measurements(
    monkeypatch: pytest.MonkeyPatch, busy: float = 0.0, prompt: Sequence[float] = ()
) -> list[Rates]:
    """Make ``measure_rates`` return scripted rates, on a machine ``busy`` cores busy.

    The prompt rates of ``prompt`` in turn, then 100, 101, ...
    """
    made: list[Rates] = []

    def measure(model: object) -> Rates:
        n = len(made)
        made.append(Rates(prompt[n] if n < len(prompt) else 100.0 + n, 10.0 + n))
        return made[-1]

    monkeypatch.setattr(runtime, "measure_rates", measure)
    monkeypatch.setattr(runtime, "measure_alone", lambda fn: (fn(), busy))
    return made


def rates_file() -> Path:
    (cached,) = (Path(os.environ["STRUCTSPEC_CACHE_DIR"]) / "rates").glob("*.json")
    return cached


def test_rates_are_measured_at_the_first_loads_then_read_back(gguf_stand_in, monkeypatch):
    made = counted_measurements(monkeypatch)
    loads = [runtime.model_rates(gguf_stand_in, announce=None) for _ in range(RATES_SAMPLES + 2)]
    assert len(made) == RATES_SAMPLES
    assert loads[:RATES_SAMPLES] == made  # each faster than the last here
    assert loads[RATES_SAMPLES:] == [made[-1]] * 2
    assert json.loads(rates_file().read_text())["samples"] == RATES_SAMPLES


def test_the_fastest_rates_measured_are_kept(gguf_stand_in, monkeypatch):
    # A slow moment (the second load's prompt rate) does not choose the defaults.
    made = counted_measurements(monkeypatch, prompt=(450.0, 280.0, 400.0))
    loads = [runtime.model_rates(gguf_stand_in, announce=None) for _ in range(RATES_SAMPLES + 1)]
    assert [r.prompt_tps for r in loads] == [450.0] * (RATES_SAMPLES + 1)
    assert [r.decode_tps for r in loads] == [10.0, 11.0, 12.0, 12.0]
    assert len(made) == RATES_SAMPLES


def test_rates_kept_before_the_count_was_are_one_measurement(gguf_stand_in, monkeypatch):
    counted_measurements(monkeypatch)
    runtime.model_rates(gguf_stand_in, announce=None)
    file = rates_file()
    file.write_text(
        json.dumps({"model": str(gguf_stand_in.path), "prompt_tps": 280.0, "decode_tps": 47.0})
    )
    assert runtime.model_rates(gguf_stand_in, announce=None) == Rates(280.0, 47.0)
    assert json.loads(file.read_text())["samples"] == 2


def test_a_refresh_measures_again(gguf_stand_in, monkeypatch):
    made = counted_measurements(monkeypatch)
    for _ in range(RATES_SAMPLES):
        runtime.model_rates(gguf_stand_in, announce=None)
    assert runtime.model_rates(gguf_stand_in, announce=None, refresh=True) == made[-1]
    assert len(made) == RATES_SAMPLES + 1


def test_a_model_file_rewritten_or_moved_is_measured_anew(gguf_stand_in, tmp_path, monkeypatch):
    made = counted_measurements(monkeypatch)
    for _ in range(RATES_SAMPLES + 1):
        runtime.model_rates(gguf_stand_in, announce=None)
    assert len(made) == RATES_SAMPLES  # read back since
    gguf_stand_in.path.write_bytes(b"GGUF, another model")
    runtime.model_rates(gguf_stand_in, announce=None)
    assert len(made) == RATES_SAMPLES + 1
    moved = tmp_path / "moved.gguf"
    gguf_stand_in.path.rename(moved)
    gguf_stand_in.path = gguf_stand_in.weights = moved
    runtime.model_rates(gguf_stand_in, announce=None)
    assert len(made) == RATES_SAMPLES + 2


def test_measurements_of_model_files_gone_are_dropped(gguf_stand_in, tmp_path, monkeypatch):
    counted_measurements(monkeypatch)
    folder = Path(os.environ["STRUCTSPEC_CACHE_DIR"]) / "rates"
    folder.mkdir(parents=True)
    kept = tmp_path / "kept.gguf"
    kept.write_bytes(b"GGUF")
    (folder / "gone.json").write_text(json.dumps({"model": str(tmp_path / "gone.gguf")}))
    (folder / "kept.json").write_text(json.dumps({"model": str(kept)}))
    (folder / "damaged.json").write_text("{not json")
    runtime.model_rates(gguf_stand_in, announce=None)
    left = {p.name for p in folder.glob("*.json")}
    assert "gone.json" not in left
    assert {"damaged.json", "kept.json"} < left and len(left) == 3  # and the new measurement


def test_a_damaged_rates_file_is_measured_again(gguf_stand_in, monkeypatch):
    made = counted_measurements(monkeypatch)
    runtime.model_rates(gguf_stand_in, announce=None)
    cached = rates_file()
    for damage in ("{not json", '{"prompt_tps": -3, "decode_tps": 1}', '{"prompt_tps": 5}', "[]"):
        cached.write_text(damage)
        assert runtime.model_rates(gguf_stand_in, announce=None) == made[-1]
    assert len(made) == 5
    assert json.loads(cached.read_text())["prompt_tps"] == made[-1].prompt_tps


def test_a_rates_file_is_replaced_whole_for_the_processes_reading_it(gguf_stand_in, monkeypatch):
    """Two editor windows' servers share the folder: one reading the file while the
    other saves a measurement sees the old file or the new one, never a cut one."""
    counted_measurements(monkeypatch)
    runtime.model_rates(gguf_stand_in, announce=None)
    with rates_file().open("rb") as reader:  # open in another process, as it were
        before = rates_file().read_bytes()
        runtime.model_rates(gguf_stand_in, announce=None)  # the second measurement, saved
        assert reader.read() == before  # rewritten in place, this read an empty file
    assert json.loads(rates_file().read_text())["samples"] == 2
    assert [p.name for p in rates_file().parent.iterdir()] == [rates_file().name]


def test_a_fifo_in_the_measurement_folders_blocks_no_load(gguf_stand_in, tmp_path, monkeypatch):
    counted_measurements(monkeypatch)
    runtime.model_rates(gguf_stand_in, announce=None)
    path = rates_file()
    path.unlink()
    os.mkfifo(path)  # nobody writes it: a blocking read waits for ever
    (path.parent / "other.json").unlink(missing_ok=True)
    os.mkfifo(path.parent / "other.json")
    done = threading.Event()

    def load() -> None:
        runtime.model_rates(gguf_stand_in, announce=None)
        done.set()

    threading.Thread(target=load, daemon=True).start()
    assert done.wait(10.0)


def test_rates_measured_on_a_busy_machine_are_not_kept(gguf_stand_in, monkeypatch):
    made = counted_measurements(monkeypatch, busy=QUIET_OTHER_CORES + 1.0)
    runtime.model_rates(gguf_stand_in, announce=None)
    runtime.model_rates(gguf_stand_in, announce=None)
    assert len(made) == 2


def test_the_stand_in_has_no_rates():
    assert runtime.model_rates(StandInModel(), announce=None) is None


def test_measure_rates_leaves_the_model_empty_and_its_prefix_cache_alone(gguf_stand_in):
    sentinel = object()
    gguf_stand_in.prefix_cache = sentinel
    rates = runtime.measure_rates(gguf_stand_in)
    assert rates.prompt_tps > 0 and rates.decode_tps > 0
    assert gguf_stand_in.cached_tokens == []
    assert gguf_stand_in.prefix_cache is sentinel


def test_measure_rates_stops_at_its_time_budget(gguf_stand_in):
    ticks = iter(range(0, 1000, 2))  # every reading of the clock: 2 s later

    rates = runtime.measure_rates(gguf_stand_in, clock=lambda: float(next(ticks)))
    # one chunk of 128 tokens in 4 s, then two passes in 4 s: past the budget after each
    assert rates == Rates(runtime.RATE_CHUNK / 4.0, 2 / 4.0)


def test_the_measurements_fit_the_smallest_context():
    """``contextSize`` 256 (the least the setting takes) failed every first load on a
    machine: the cost table was measured after 400 tokens, the rates after 256."""
    model = StandInModel(n_ctx=256)
    cost = runtime.measure_verify_cost(model)
    assert cost is not None
    rates = runtime.measure_rates(model)
    assert rates.prompt_tps > 0 and rates.decode_tps > 0
