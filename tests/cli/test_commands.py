"""The CLI commands of the server surface: serve, detect, status, config, vllm-command."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest
from tests.helpers.http_server import ServerThread
from tests.helpers.raw_backend import RawBackend, http_answer

from structspec.cli import main
from structspec.detect import _probe, gguf_info, scan_gguf

ROOT = Path(__file__).resolve().parents[2]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- vllm-command -----------------------------------------------------------------


def test_vllm_command_ngram(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "vllm-command", "--model", "Qwen/Qwen2.5-Coder-7B-Instruct")
    assert code == 0
    argv = shlex.split(out)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-Coder-7B-Instruct"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }


def test_vllm_command_suffix_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "vllm-command",
        "--model",
        "m",
        "--method",
        "suffix",
        "--json",
        "--num-speculative-tokens",
        "16",
        "--max-model-len",
        "8192",
    )
    assert code == 0
    data = json.loads(out)
    assert data["speculative_config"]["method"] == "suffix"
    assert data["speculative_config"]["num_speculative_tokens"] == 16
    assert "--max-model-len" in data["argv"]
    assert json.loads(data["argv"][-1]) == data["speculative_config"]


def test_vllm_command_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "vllm-command", "--model", "m", "--prompt-lookup-min", "5")
    assert code == 2 and "prompt-lookup-min" in err
    code, _, err = run_cli(capsys, "vllm-command", "--model", "m", "--num-speculative-tokens", "0")
    assert code == 2 and "num-speculative-tokens" in err


def test_vllm_command_host_and_model_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    """``--host '[::1]'`` gave a proxy URL ``http://[[::1]]:8000``, ``0.0.0.0:9`` one of
    ``[0.0.0.0:9]``; an empty host or an option as the model went into the command."""
    code, out, _ = run_cli(capsys, "vllm-command", "--model", "m", "--host", "[::1]", "--json")
    data = json.loads(out)
    assert code == 0 and data["argv"][4] == "::1"
    assert data["proxy_argv"][-1] == "http://[::1]:8000"
    for host in ("0.0.0.0:9", "", "a b"):
        code, _, err = run_cli(capsys, "vllm-command", "--model", "m", "--host", host)
        assert code == 2 and "is not a host name or address" in err
    code, _, err = run_cli(capsys, "vllm-command", "--model=--help")
    assert code == 2 and "--model must name a model" in err


# -- config -------------------------------------------------------------------------


def test_config_origins(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('max_tokens = 64\nsources = ["lookup"]\nthreads = "many"\n')
    monkeypatch.setenv("STRUCTSPEC_CONFIG", str(cfg))
    monkeypatch.setenv("STRUCTSPEC_DEBOUNCE_MS", "120")
    code, out, _ = run_cli(capsys, "config", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["config_file"] == str(cfg) and data["config_file_exists"]
    s = data["settings"]
    assert s["max_tokens"] == {"value": 64, "origin": "file"}
    assert s["sources"] == {"value": ["lookup"], "origin": "file"}
    assert s["debounce_ms"] == {"value": 120, "origin": "env"}
    assert s["threads"]["origin"] == "default"
    assert any("threads" in e for e in data["errors"])
    code, out, _ = run_cli(capsys, "config")
    assert code == 0 and "max_tokens" in out and "file" in out and str(cfg) in out
    code, out, _ = run_cli(capsys, "config", "--path")
    assert out.strip() == str(cfg)


def test_config_does_not_print_the_backend_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRUCTSPEC_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("STRUCTSPEC_BACKEND_API_KEY", "hunter2")
    for args in (("config", "--json"), ("config",)):
        code, out, _ = run_cli(capsys, *args)
        assert code == 0 and "hunter2" not in out and "(set)" in out


# -- detect -------------------------------------------------------------------------


def write_gguf(path: Path, *, arch: str = "llama", fim: bool = True, template: bool = True) -> None:
    """A tiny GGUF with the metadata detect reads (no real weights)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("Tiny Coder")
    w.add_context_length(16384)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    tokens = ["a", "b"] + (["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"] if fim else [])
    w.add_token_list(tokens)
    if template:
        w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    w.add_tensor("t", np.zeros((4,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_detect_finds_gguf_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    hf = home / ".cache/huggingface/hub/models--Org--Tiny-GGUF/snapshots/abc/tiny-q8_0.gguf"
    write_gguf(hf)
    blob = home / ".ollama/models/blobs/sha256-1234"
    write_gguf(blob, arch="qwen2", fim=False, template=False)
    (home / ".ollama/models/blobs/sha256-5678").write_text("a licence, not a model")
    manifest = home / ".ollama/models/manifests/registry.ollama.ai/library/tiny/latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps(
            {
                "layers": [
                    {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:1234"}
                ]
            }
        )
    )
    (manifest.parent / "deep").write_text("[" * 50_000 + "]" * 50_000)  # no manifest: skipped
    lms = home / ".lmstudio/models/pub/repo/model.gguf"
    write_gguf(lms, arch="gemma3", fim=False)
    (home / ".lmstudio/models/pub/repo/broken.gguf").write_bytes(b"GGUF\x03\x00garbage")
    env = {"HOME": str(home)}
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    found = {f.name: f for f in scan_gguf(env=env)}
    assert set(found) == {
        "Org/Tiny-GGUF/tiny-q8_0.gguf",
        "tiny:latest",
        "model.gguf",
        "broken.gguf",
    }
    tiny = found["Org/Tiny-GGUF/tiny-q8_0.gguf"]
    assert (tiny.location, tiny.architecture, tiny.quantization, tiny.context_length) == (
        "huggingface",
        "llama",
        "Q8_0",
        16384,
    )
    assert tiny.fim and tiny.chat_template and not tiny.error
    assert found["tiny:latest"].architecture == "qwen2" and not found["tiny:latest"].fim
    assert found["broken.gguf"].error.startswith("cannot read GGUF metadata")
    # Cached: a second scan reads nothing (the cache file answers).
    assert (home / ".cache/structspec/gguf-metadata.json").is_file()
    again = gguf_info(hf, "huggingface", cache={})
    assert again.architecture == "llama"
    code, out, _ = run_cli(capsys, "detect", "--json", "--timeout", "0.2")
    assert code == 0
    data = json.loads(out)
    assert {f["name"] for f in data["gguf_files"]} == set(found)
    assert [b["port"] for b in data["backends"]] == [8000, 8080, 1234, 11434]
    code, out, _ = run_cli(capsys, "detect", "--timeout", "0.2")
    assert code == 0 and "Q8_0" in out and "16384" in out and "qwen2" in out
    code, out, _ = run_cli(capsys, "detect", "--no-files", "--timeout", "0.2")
    assert code == 0 and "Local servers" in out


def test_the_metadata_cache_is_in_the_cache_folder_and_replaced_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes detecting at once: a reader sees the old file or the new one, and a
    FIFO put there blocks nobody."""
    from structspec import detect

    monkeypatch.setenv("STRUCTSPEC_CACHE_DIR", str(tmp_path / "cache"))
    detect._save_cache({"a": {"architecture": "llama"}})
    path = tmp_path / "cache" / "gguf-metadata.json"
    with path.open("rb") as reader:
        before = path.read_bytes()
        detect._save_cache({"b": {"architecture": "qwen2"}})
        assert reader.read() == before  # rewritten in place, this read the other save
    assert detect._load_cache() == {"b": {"architecture": "qwen2"}}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    path.unlink()
    os.mkfifo(path)
    assert detect._load_cache() == {}  # a blocking read would wait for ever


def test_probe_recognises_servers(standin_server: ServerThread) -> None:
    found = _probe("test", standin_server.port, "127.0.0.1", 2.0)
    assert found.running and found.models == ["standin"]
    assert found.server == "structspec" and not found.usable  # never proxy to ourselves
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    assert not _probe("dead", dead, "127.0.0.1", 0.5).running


ODD_MODEL_LISTS = [
    b'{"data": 5}',
    b'{"data": true}',
    b'{"data": "model"}',
    b"[1, 2]",
    b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # nested past Python's recursion
    b"\xff\xfe not JSON",
]


@pytest.mark.parametrize("body", ODD_MODEL_LISTS, ids=range(len(ODD_MODEL_LISTS)))
def test_probe_reads_an_odd_model_list_as_an_error(body: bytes) -> None:
    """``backend = "auto"`` probes whatever listens on the usual ports: an odd answer is
    a server that is not usable, never an exception (which failed every completion)."""
    json_type = b"Content-Type: application/json"
    with RawBackend(lambda method, path: http_answer("200 OK", body, json_type)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        found = _probe("odd", port, "127.0.0.1", 2.0)
    assert found.running and found.error and not found.usable


def test_probe_bounds_a_dripping_or_endless_answer() -> None:
    """httpx's timeout bounds each read: the probe bounds the whole answer, and its size."""

    def drip(method: str, path: str) -> Iterator[bytes]:
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        for _ in range(100):
            time.sleep(0.2)  # each read well within the timeout
            yield b" "

    def endless(method: str, path: str) -> Iterator[bytes]:
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
        for _ in range(64):
            yield b" " * (1 << 20)

    for respond in (drip, endless):
        with RawBackend(respond) as server:
            port = int(server.url.rsplit(":", 1)[1])
            t0 = time.monotonic()
            found = _probe("slow", port, "127.0.0.1", 0.5)
            assert time.monotonic() - t0 < 3.0  # the drip alone takes 20 s
        assert found.running and found.error and not found.usable


# -- status ---------------------------------------------------------------------------


def test_status_once_json(standin_server: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    httpx.post(standin_server.url + "/v1/completions", json={"prompt": "def f(", "max_tokens": 8})
    code, out, _ = run_cli(capsys, "status", "--url", standin_server.url, "--once", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["mode"] == "engine" and data["model"] == "standin"
    assert data["tokens"] >= 8 and data["passes"] >= 1
    code, out, _ = run_cli(capsys, "status", "--url", standin_server.url + "/v1", "--once")
    assert code == 0 and "tokens/s" in out
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    code, _, err = run_cli(capsys, "status", "--url", f"http://127.0.0.1:{dead}", "--once")
    assert code == 2 and "cannot reach" in err


# -- serve ----------------------------------------------------------------------------


def test_serve_command_end_to_end(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ, PYTHONPATH=str(ROOT / "server"), STRUCTSPEC_CONFIG=str(tmp_path / "none.toml")
    )
    cmd = [sys.executable, "-m", "structspec", "serve", "--model", "standin", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "x = ", "max_tokens": 4}
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        # A second server on the same port: one clear line, exit status 2.
        busy = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert busy.returncode == 2
        assert "already in use" in busy.stderr and "Traceback" not in busy.stderr
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.stderr is not None
    assert "serving model 'standin'" in proc.stderr.read()


def test_serve_rejects_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "serve", "--model", "standin", "--backend", "http://x")
    assert code == 2 and "exclude each other" in err
    code, _, err = run_cli(capsys, "serve", "--backend", "ftp://x", "--port", "1")
    assert code == 2
    code, _, err = run_cli(capsys, "serve", "--port", "70000")
    assert code == 2 and "--port" in err


def test_detect_prints_what_files_hold_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Metadata and names are shown, never read as rich markup (``[/bold]`` failed the
    command) or as the terminal's escape sequences; a symlink loop is skipped."""
    folder = tmp_path / "models"
    write_gguf(folder / "markup.gguf", arch="[/bold]")
    write_gguf(folder / "escape.gguf", arch="\x1b]0;title\x07\x1b[2Jllama")
    write_gguf(folder / "odd[" / "x]" / "named.gguf")
    (folder / "a.gguf").symlink_to(folder / "b.gguf")
    (folder / "b.gguf").symlink_to(folder / "a.gguf")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRUCTSPEC_CACHE_DIR", str(tmp_path / "cache"))
    code, out, _ = run_cli(capsys, "detect", "--timeout", "0.1", "--path", str(folder))
    assert code == 0
    assert "[/bold]" in out and "\x1b" not in out
    assert "named.gguf" in out and "x]" in out


def test_status_and_config_print_what_they_read_as_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rich markup in a server's metrics or a setting (``[/x]``) failed the command with a
    traceback; a histogram bucket without ``le`` did too; a URL's password was printed."""
    page = (
        b"# TYPE structspec_info gauge\n"
        b'structspec_info{mode="engine",model="[/x]"} 1\n'
        b"# TYPE structspec_drafted_tokens_total counter\n"
        b'structspec_drafted_tokens_total{source="[/y]"} 5\n'
        b"# TYPE structspec_request_latency_seconds histogram\n"
        b'structspec_request_latency_seconds_bucket{foo="1"} 3\n'
    )
    monkeypatch.setenv("COLUMNS", "200")
    with RawBackend(lambda method, path: http_answer("200 OK", page)) as server:
        code, out, _ = run_cli(capsys, "status", "--once", "--url", server.url)
        assert code == 0 and "[/x]" in out and "[/y]" in out
        code, out, _ = run_cli(capsys, "status", "--once", "--json", "--url", server.url)
        assert code == 0 and json.loads(out)["model"] == "[/x]"
    code, _, err = run_cli(capsys, "status", "--once", "--url", "http://me:s3cret@127.0.0.1:1")
    assert code == 2 and "s3cret" not in err
    monkeypatch.setenv("STRUCTSPEC_CONFIG", os.devnull)
    monkeypatch.setenv("STRUCTSPEC_MODEL", "[/x]")
    monkeypatch.setenv("STRUCTSPEC_THREADS", "[/y]")
    code, out, _ = run_cli(capsys, "config")
    assert code == 0 and "[/x]" in out and "[/y]" in out
