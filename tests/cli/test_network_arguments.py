"""Hosts, URLs, keys and numbers from the command line get one line, not a traceback.

``detect --host``, ``status --url`` / ``--interval`` / ``$STRUCTSPEC_API_KEY``,
``serve --host`` / ``--backend`` and ``vllm-command``'s numbers: each bad value
is exit status 2 with one ``structspec: error:`` line. All through subprocesses,
as a user runs them; nothing here loads a model or needs a server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from structspec.backends.address import check_backend, split_url

ROOT = Path(__file__).resolve().parents[2]


def structspec(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("STRUCTSPEC_") or k == "STRUCTSPEC_CACHE_DIR"
    }
    clean.update(PYTHONPATH=str(ROOT / "server"), STRUCTSPEC_CONFIG=os.devnull, **env)
    return subprocess.run(
        [sys.executable, "-m", "structspec", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean,
        stdin=subprocess.DEVNULL,
    )


def refused(p: subprocess.CompletedProcess[str], needle: str) -> None:
    """Exit status 2 and one error line naming ``needle``."""
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("structspec: error: "), p.stderr[-2000:]
    assert needle in lines[0], lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:5", "1.2.3.4:5", "é" * 70, "a" * 300, "a..b", "a b", "", "::1:2:3:4:5:6:7:8:9"],
)
def test_detect_refuses_a_host_that_is_no_host(host: str) -> None:
    refused(structspec("detect", "--no-files", "--json", "--host", host), "--host")


def test_detect_brackets_an_ipv6_host() -> None:
    p = structspec("detect", "--no-files", "--json", "--timeout", "0.2", "--host", "::1")
    assert p.returncode == 0, p.stderr[-2000:]
    urls = [b["url"] for b in json.loads(p.stdout)["backends"]]
    assert urls and all(u.startswith("http://[::1]:") for u in urls), urls


@pytest.mark.parametrize(
    ("path", "needle"),
    [("~nosuchuser-structspec", "no such folder"), ("/tmp/" + "a" * 300, "--path")],
)
def test_detect_refuses_a_path_that_is_no_folder(path: str, needle: str) -> None:
    refused(structspec("detect", "--json", "--path", path), needle)


@pytest.mark.parametrize(
    ("url", "needle"),
    [("http://127.0.0.1:abc", "not a usable URL"), ("http://" + "a" * 300, "no valid host")],
)
def test_status_refuses_a_url_it_cannot_open(url: str, needle: str) -> None:
    refused(structspec("status", "--once", "--url", url), needle)


@pytest.mark.parametrize("key", ["é", "a b"])
def test_status_refuses_a_key_no_client_can_send(key: str) -> None:
    p = structspec("status", "--once", "--url", "http://127.0.0.1:1", STRUCTSPEC_API_KEY=key)
    refused(p, "$STRUCTSPEC_API_KEY must be printable ASCII")


@pytest.mark.parametrize("interval", ["nan", "inf", "1e300", "0"])
def test_status_refuses_an_interval_that_is_not_finite_and_positive(interval: str) -> None:
    p = structspec("status", "--url", "http://127.0.0.1:1", "--interval", interval)
    refused(p, "--interval must be")


def test_serve_refuses_a_host_the_resolver_cannot_encode() -> None:
    p = structspec(
        "serve",
        "--model",
        "standin",
        "--port",
        str(_free_port()),
        "--allow-unauthenticated",
        "--host",
        "é" * 70,
    )
    refused(p, "is not an address or host name")


@pytest.mark.parametrize(
    ("backend", "needle"),
    [
        ("http://127.0.0.1:abc", "port must be a number from 1 to 65535"),
        ("http://127.0.0.1:0", "port must be a number from 1 to 65535"),
        ("http://127.0.0.1:70000", "port must be a number from 1 to 65535"),
        ("http://[", "is not a URL"),
        ("http://", "must be an http:// or https:// URL"),
        ("http://:8000", "names no host"),
        ("http://" + "é" * 70 + ":8000", "no valid host name"),
        ("http://☃.com:8000", "no valid host name"),
        ("", "must be an http:// or https:// URL"),
        ("http://alice:s3cret@127.0.0.1:8000", "user name or password"),
        ("http://127.0.0.1:8000/v1?api-key=K", "has a query"),
    ],
)
def test_serve_refuses_a_backend_flag_like_the_setting(backend: str, needle: str) -> None:
    refused(structspec("serve", "--port", str(_free_port()), "--backend", backend), needle)
    with pytest.raises(ValueError, match="backend"):
        check_backend(backend)


def test_serve_refuses_a_backend_setting_with_a_bad_port() -> None:
    p = structspec("serve", "--port", str(_free_port()), STRUCTSPEC_BACKEND="http://127.0.0.1:abc")
    refused(p, "port must be a number from 1 to 65535")


def test_a_backend_urls_password_is_never_shown() -> None:
    for url in (
        "http://alice:s3cret@127.0.0.1:8000",
        "http://alice:s3cret@[",
        "http://a:s3cret@h:99999",
    ):
        with pytest.raises(ValueError) as err:
            split_url(url)
        assert "s3cret" not in str(err.value)


def test_split_url_keeps_good_urls() -> None:
    assert split_url("http://[::1]:8000/v1") == ("http://[::1]:8000", "openai")
    assert split_url("https://é.example/api/generate") == ("https://é.example", "ollama")
    assert split_url("http://localhost:8080") == ("http://localhost:8080", None)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--method", "suffix", "--suffix-max-spec-factor", "inf"], "finite positive"),
        (["--method", "suffix", "--suffix-max-spec-factor", "nan"], "finite positive"),
        (["--method", "suffix", "--suffix-min-token-prob", "nan"], "between 0 and 1"),
        (["--max-model-len", "-5"], "--max-model-len must be a positive"),
        (["--max-model-len", "0"], "--max-model-len must be a positive"),
    ],
)
def test_vllm_command_refuses_non_finite_and_non_positive_numbers(
    flags: list[str], needle: str
) -> None:
    refused(structspec("vllm-command", "--model", "m", *flags), needle)


def test_vllm_command_proxy_brackets_an_ipv6_host() -> None:
    p = structspec("vllm-command", "--model", "m", "--host", "::1", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["proxy_argv"][-1] == "http://[::1]:8000"
