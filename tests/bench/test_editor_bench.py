"""The editor replay benchmark runs end to end (stand-in model, tiny workload)."""

from __future__ import annotations

from pathlib import Path

from structspec.bench.editor import plan_points, run_editor_benchmark


def test_plan_points_clears_and_types_real_lines(tmp_path: Path):
    src = tmp_path / "m.py"
    src.write_text("".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(30)))
    points = plan_points([str(src)], 4, 10)
    assert len(points) == 4
    for p in points:
        lines = p.text.split("\n")
        assert lines[p.line] == p.indent  # the line is cleared to its indentation
        assert p.typed and len(p.typed) <= 10


def test_editor_benchmark_smoke(tmp_path: Path):
    src = tmp_path / "m.py"
    src.write_text("".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(30)))
    lines: list[str] = []
    result = run_editor_benchmark(
        [str(src)],
        "standin",
        1,
        out=lines.append,
        points_per_file=2,
        max_chars=4,
        reuse_off_keystrokes=3,
    )
    assert set(result["configs"]) == {"structspec", "greedy", "no prefix reuse"}
    assert result["configs"]["structspec"]["keystrokes"] == result["keystrokes"] == 8
    assert result["configs"]["no prefix reuse"]["keystrokes"] == 2  # 1 per point
    assert any(line.startswith("prefix reuse:") for line in lines)
