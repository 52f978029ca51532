"""Commands refuse bad settings and unwritable outputs up front; `mine` reads only files.

All through subprocesses, as a user runs them, on the stand-in model.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from structspec.commands.mine import MAX_FILE_BYTES, read_code

ROOT = Path(__file__).resolve().parents[2]


def structspec(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "structspec", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def _env(tmp_path: Path, config: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRUCTSPEC_")}
    path = tmp_path / "config.toml"
    if config is not None:
        path.write_text(config, encoding="utf-8")
    env.update(PYTHONPATH=str(ROOT / "server"), STRUCTSPEC_CONFIG=str(path), **extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _commands() -> dict[str, list[str]]:
    return {
        "run": ["run", "--model", "standin", "--prompt", "ab", "--max-tokens", "2"],
        "serve": ["serve", "--model", "standin", "--port", str(_free_port())],
        "benchmark": [
            "benchmark",
            "--model",
            "standin",
            "--suite",
            "humaneval",
            "--limit",
            "1",
            "--modes",
            "greedy",
            "--max-tokens",
            "4",
        ],  # fmt: skip
    }


@pytest.mark.parametrize("command", ["run", "serve", "benchmark"])
@pytest.mark.parametrize(
    ("config", "env", "needle"),
    [
        ('model = "standin"\nmax_tokens = 64\nthreads = \n', {}, "config file"),  # TOML syntax
        ('modle = "x.gguf"\n', {}, "unknown setting 'modle'"),
        ("threads = 0\n", {}, "threads must be between"),
        (None, {"STRUCTSPEC_THREADS": "many"}, "threads must be an integer"),
        (None, {"STRUCTSPEC_SPECULATIVE": "perhaps"}, "speculative must be true or false"),
        (None, {"STRUCTSPEC_SOURCES": "lookup,bogus"}, "unknown draft source"),
    ],
)
def test_bad_settings_refuse_to_start(
    tmp_path: Path, command: str, config: str | None, env: dict[str, str], needle: str
) -> None:
    p = structspec(*_commands()[command], env=_env(tmp_path, config, **env), timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "refusing to start with bad settings" in p.stderr and needle in p.stderr
    assert "Traceback" not in p.stderr and "keeping" not in p.stderr
    # `structspec config` still shows the same problem and exits 0.
    shown = structspec("config", env=_env(tmp_path, config, **env), timeout=60)
    assert shown.returncode == 0 and needle in shown.stdout + shown.stderr


def test_threads_above_cpu_count_warn(tmp_path: Path) -> None:
    threads = str(min(256, (os.cpu_count() or 1) + 1))
    p = structspec(*_commands()["run"], "--threads", threads, env=_env(tmp_path))
    assert p.returncode == 0, p.stderr
    assert f"threads = {threads} (flag) is more than the" in p.stderr


def test_benchmark_checks_output_paths_before_running(tmp_path: Path) -> None:
    bench = _commands()["benchmark"]
    for flag in ("--json-out", "--markdown-out", "--trace-csv"):
        p = structspec(*bench, flag, str(tmp_path / "missing" / "out"), env=_env(tmp_path))
        assert p.returncode == 2 and "cannot write" in p.stderr and "Traceback" not in p.stderr
        assert "greedy" not in p.stdout  # refused before the first prompt ran
    p = structspec(*bench, "--json-out", str(tmp_path), env=_env(tmp_path))
    assert p.returncode == 2 and "is a directory" in p.stderr
    existing = tmp_path / "kept.md"
    existing.write_text("previous report\n", encoding="utf-8")
    structspec(*bench, "--markdown-out", str(tmp_path / "missing" / "x"), env=_env(tmp_path))
    assert existing.read_text(encoding="utf-8") == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.md"]  # the check left nothing


@pytest.mark.parametrize(
    ("variant", "needle"),
    [
        (["debounceMs"], "write SETTING=VALUE"),
        (["debounceMss=0"], "unknown setting 'debounceMss'"),
        (["debounceMs=-1"], "debounceMs must be between"),
        (["windowTokens=1024", "windowTokens=768"], "names windowTokens twice"),
    ],
)
def test_editor_variant_is_checked_before_any_server_starts(
    tmp_path: Path, variant: list[str], needle: str
) -> None:
    args = ["benchmark", "--model", "standin", "--suite", "editor"]
    for item in variant:
        args += ["--variant", item]
    p = structspec(*args, env=_env(tmp_path), timeout=60)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr
    assert "editor replay:" not in p.stdout


# -- mine: regular files only --------------------------------------------------------


def test_mine_reads_code_files_bounded(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.py"
    zero.symlink_to("/dev/zero")
    assert read_code(fifo) is None  # skipped with a warning, never blocking
    assert read_code(zero) is None  # never read to its (missing) end
    big = tmp_path / "big.py"
    big.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    assert read_code(big) is None
    big.write_bytes(b"x" * MAX_FILE_BYTES)
    assert read_code(big) == "x" * MAX_FILE_BYTES
    assert MAX_FILE_BYTES >= 100_000


def test_mine_skips_fifos_and_devices(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    code = "def add(a, b):\n    return a + b\n\n" * 40
    for i in range(3):
        (src / f"m{i}.py").write_text(code, encoding="utf-8")
    os.mkfifo(src / "pipe.py")
    (src / "zero.py").symlink_to("/dev/zero")
    out = tmp_path / "rules.bin"
    p = structspec(
        "mine", str(src), str(src / "pipe.py"), "-o", str(out), "--model", "standin",
        "--min-count", "2", env=_env(tmp_path), timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "skipping" in p.stderr and "a FIFO" in p.stderr and "a device" in p.stderr
    assert "from 3 files" in p.stdout and out.is_file()


def test_mine_skips_symlink_loops_and_names_one_given(tmp_path: Path) -> None:
    """A looping symlink names no file: skipped in a directory, refused on the command line."""
    src = tmp_path / "src"
    src.mkdir()
    code = "def add(a, b):\n    return a + b\n\n" * 40
    for i in range(3):
        (src / f"m{i}.py").write_text(code, encoding="utf-8")
    (src / "self.py").symlink_to("self.py")
    (src / "a.py").symlink_to("b.py")
    (src / "b.py").symlink_to("a.py")
    (src / "same.py").symlink_to("m0.py")  # the same file twice: read once
    (src / "sub").symlink_to(".")  # a directory that contains itself
    out = tmp_path / "rules.bin"
    args = ["-o", str(out), "--model", "standin", "--min-count", "2"]
    p = structspec("mine", str(src), *args, env=_env(tmp_path), timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    for name in ("self.py", "a.py", "b.py"):
        assert f"skipping {src / name}: Too many levels of symbolic links" in p.stderr
    assert "from 3 files" in p.stdout and out.is_file()
    p = structspec("mine", str(src / "self.py"), *args, env=_env(tmp_path), timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"cannot read {src / 'self.py'}: Too many levels of symbolic links" in p.stderr
