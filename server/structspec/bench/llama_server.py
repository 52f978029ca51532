"""llama.cpp's own ``llama-server`` as a side-by-side benchmark mode.

What a llama.vscode user runs is llama.cpp's server, with or without its
model-free speculation (``--spec-type ngram-mod`` and friends). The benchmark
starts one server per such mode on the same GGUF and thread count, on a free
loopback port, and asks each prompt of the suite through ``POST /completion``
as token ids (no BOS is added to a token prompt, so every mode sees the same
tokens), greedily (``samplers: ["top_k"], top_k: 1``) and from a cold cache
(``cache_prompt: false``), like the engine's own modes. Sampled (temperature
above 0), the request names the engine's chain (``samplers: ["top_k", "top_p",
"min_p", "temperature"]``, so none of the server's other default samplers
applies) with the benchmark's ``temperature``, ``top_k``, ``top_p``,
``min_p`` and ``seed``.

Times: ``seconds`` is the request's wall clock, prefill and HTTP included (what
a client waits for); the decode time is the server's own ``predicted_ms``,
scaled so that the run's ``decode_tps`` equals the server's own
``predicted_per_second``. Its text can differ from llama-cpp-python's greedy
text (a different llama.cpp version, different kernels): compare speed, not text.

The binary is not a dependency: ``tools/build-llama-server.sh`` builds it.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import httpx

from structspec.bench.harness import GREEDY, LLAMA_SERVER_MODE, Run, llama_seed
from structspec.bench.suites import Prompt
from structspec.engine.sampling import Sampling
from structspec.model.amx import amx_backend

#: The model-free speculation types of llama.cpp's server (``--spec-type``).
SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
#: How long a server may take to load the model before the benchmark gives up.
START_TIMEOUT_S = 120.0
#: One request's limit: a hung server must not hang the benchmark.
REQUEST_TIMEOUT_S = 600.0


class LlamaServerError(RuntimeError):
    """The llama-server baseline could not start or answer (the message is for the user)."""


def spec_type(mode: str) -> str | None:
    """The ``--spec-type`` of a llama-server mode (``None``: plain greedy).

    Raises ``ValueError`` for a type the server does not have.
    """
    if mode == LLAMA_SERVER_MODE:
        return None
    kind = mode.split(":", 1)[1]
    if kind not in SPEC_TYPES:
        raise ValueError(f"{mode}: unknown spec type {kind!r}; use one of {', '.join(SPEC_TYPES)}")
    return kind


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(
    proc: subprocess.Popen[bytes], client: httpx.Client, timeout_s: float
) -> int | None:
    """Wait until a server started as ``proc`` answers ``GET /health`` with 200.

    ``None`` once it does; the exit code if the process ended first. Raises
    ``TimeoutError`` after ``timeout_s`` (the caller names the server).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc.returncode
        with contextlib.suppress(httpx.HTTPError):
            if client.get("/health", timeout=2.0).status_code == 200:
                return None
        time.sleep(0.25)
    raise TimeoutError


class LlamaServerBaseline:
    """One running ``llama-server`` process answering one benchmark mode."""

    def __init__(
        self,
        binary: str,
        mode: str,
        model_path: str,
        threads: int,
        n_ctx: int,
        log_dir: Path | None = None,
        sampling: Sampling = GREEDY,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``extra_args``: more of llama-server's flags (the editor benchmark's set-up)."""
        if not Path(binary).is_file():
            raise LlamaServerError(f"llama-server binary not found: {binary}")
        self.mode = mode
        self.sampling = sampling
        kind = spec_type(mode)
        self.port = free_port()
        args = [
            binary,
            "--model",
            model_path,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--threads",
            str(threads),
            "--threads-batch",
            str(threads),
            "--ctx-size",
            str(n_ctx),
            "--parallel",
            "1",
            "--no-webui",
        ]
        if amx_backend():  # built natively here too: AMX's buffers crash (model/llama.py)
            args.append("--no-repack")
        if kind is not None:
            args += ["--spec-type", kind]
        args += extra_args
        self.args = args
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = (log_dir / f"{mode.replace(':', '-')}.log") if log_dir else None
        log = self.log_path
        self._log: IO[bytes] | None = open(log, "wb") if log else None  # noqa: SIM115
        self.proc = subprocess.Popen(
            args, stdout=self._log or subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        self.client = httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        try:
            code = wait_healthy(self.proc, self.client, START_TIMEOUT_S)
        except TimeoutError:
            raise LlamaServerError(
                f"llama-server ({self.mode}) not ready after {START_TIMEOUT_S:.0f} s"
            ) from None
        if code is not None:
            raise LlamaServerError(f"llama-server ({self.mode}) exited with code {code} at start")

    def run(self, prompt: Prompt, tokens: Sequence[int], repeat: int, max_tokens: int) -> Run:
        """Generate from ``tokens`` (greedy or sampled), from a cold cache."""
        body: dict[str, object] = {
            "prompt": list(tokens),
            "n_predict": max_tokens,
            "cache_prompt": False,
            "return_tokens": True,
            "stream": False,
            **self._sampler_fields(),
        }
        t0 = time.perf_counter()
        try:
            resp = self.client.post("/completion", json=body)
        except httpx.HTTPError as exc:
            raise LlamaServerError(f"llama-server ({self.mode}) on {prompt.id}: {exc}") from None
        seconds = time.perf_counter() - t0
        if resp.status_code != 200:
            raise LlamaServerError(
                f"llama-server ({self.mode}) on {prompt.id}: HTTP {resp.status_code} "
                f"{resp.text[:200]}"
            )
        data = resp.json()
        out = [int(t) for t in data.get("tokens") or []]
        timings = data.get("timings") or {}
        n_pred = int(timings.get("predicted_n") or len(out))
        predicted_s = float(timings.get("predicted_ms") or 0.0) / 1000.0
        # decode_tps is (n - 1) / decode_seconds; the server's own rate is n / predicted_ms.
        decode_seconds = predicted_s * (len(out) - 1) / n_pred if n_pred and out else 0.0
        drafted = int(timings.get("draft_n") or 0)
        accepted = int(timings.get("draft_n_accepted") or 0)
        return Run(
            prompt.id,
            self.mode,
            repeat,
            out,
            seconds,
            decode_seconds,
            drafted=drafted,
            accepted=accepted,
        )

    def _sampler_fields(self) -> dict[str, object]:
        """The request's sampler chain and parameters (see the module docstring)."""
        s = self.sampling
        if s.greedy:
            return {"samplers": ["top_k"], "top_k": 1}
        fields: dict[str, object] = {
            "samplers": ["top_k", "top_p", "min_p", "temperature"],
            "temperature": s.temperature,
            "top_k": s.top_k,  # 0: off, as in llama.cpp
            "top_p": s.top_p,
            "min_p": s.min_p,
        }
        seed = llama_seed(s)
        if seed is not None:  # left out: the server's own random seed
            fields["seed"] = seed
        return fields

    def close(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
