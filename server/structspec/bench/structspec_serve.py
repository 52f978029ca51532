"""``structspec serve`` over HTTP as a side-by-side benchmark mode.

What a client of the OpenAI-compatible server waits for is the engine plus
everything around it: the HTTP request, JSON, the queue, the worker thread,
tokenization. The ``serve`` mode starts ``structspec serve`` in a subprocess
on the benchmark's model, threads, context, draft sources and rules, on a
free loopback port, and asks each prompt through ``POST /v1/completions`` as
token ids (the same tokens as every other mode; a token prompt is never
healed), from a cold cache (``cache_prompt: false``, as the engine's own modes
and llama-server), with the benchmark's sampling, and reads the generated ids
back (``return_tokens``): greedy, they are the in-process engine's, and the
exactness check counts them like the engine's own modes'.

Times: ``seconds`` is the request's wall clock (what a client waits for); the
decode time is the server's own (``decode_ms``, its verification passes),
scaled to tokens after the first like llama-server's (``bench/llama_server.py``);
it includes the first pass, which the in-process modes' decode time leaves out,
so at many tokens per pass it reads lower than theirs: compare serve end to end.
``engine_seconds`` is the engine's own prefill, drafting and verification
time, as for the in-process modes: the rest of a request's wall clock is what
surrounds the engine's work, in-process or behind HTTP.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from structspec.bench.harness import GREEDY, SERVE_MODE, Run
from structspec.bench.llama_server import free_port, wait_healthy
from structspec.bench.suites import Prompt
from structspec.engine.sampling import Sampling

#: How long the server may take to load the model before the benchmark gives up.
START_TIMEOUT_S = 180.0
#: One request's limit: a hung server must not hang the benchmark.
REQUEST_TIMEOUT_S = 600.0


class ServeError(RuntimeError):
    """``structspec serve`` could not start or answer (the message is for the user)."""


@dataclass(frozen=True)
class ServeOptions:
    """The benchmark's settings that the server must share with the in-process engine."""

    model: str  # a GGUF path, or the stand-in's name
    threads: int
    context_size: int
    sources: tuple[str, ...]
    rules_file: str = ""

    def arguments(self) -> list[str]:
        args = [
            "--model",
            self.model,
            "--threads",
            str(self.threads),
            "--context-size",
            str(self.context_size),
            "--sources",
            ",".join(self.sources),
        ]
        return [*args, "--rules-file", self.rules_file] if self.rules_file else args


class ServeBaseline:
    """One running ``structspec serve`` answering the ``serve`` mode."""

    def __init__(self, options: ServeOptions, sampling: Sampling = GREEDY) -> None:
        self.sampling = sampling
        self.port = free_port()
        args = [sys.executable, "-m", "structspec", "serve", *options.arguments()]
        args += ["--port", str(self.port)]
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self._stderr)
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", timeout=REQUEST_TIMEOUT_S
        )
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        try:
            code = wait_healthy(self.proc, self.client, START_TIMEOUT_S)
        except TimeoutError:
            raise ServeError(f"structspec serve not ready after {START_TIMEOUT_S:.0f} s") from None
        if code is not None:
            raise ServeError(
                f"structspec serve exited with code {code} at start" + self._last_words()
            )

    def body(self, tokens: Sequence[int], max_tokens: int) -> dict[str, object]:
        """The request of one prompt (see the module docstring)."""
        s = self.sampling
        body: dict[str, object] = {
            "prompt": list(tokens),
            "max_tokens": max_tokens,
            "cache_prompt": False,
            "return_tokens": True,
            "temperature": s.temperature,
        }
        if not s.greedy:
            body.update(top_k=s.top_k, top_p=s.top_p, min_p=s.min_p)
            if s.seed is not None:
                body["seed"] = s.seed
        return body

    def run(self, prompt: Prompt, tokens: Sequence[int], repeat: int, max_tokens: int) -> Run:
        """Generate from ``tokens`` over HTTP, from a cold cache."""
        t0 = time.perf_counter()
        try:
            resp = self.client.post("/v1/completions", json=self.body(tokens, max_tokens))
        except httpx.HTTPError as exc:
            raise ServeError(f"structspec serve on {prompt.id}: {exc}") from None
        seconds = time.perf_counter() - t0
        if resp.status_code != 200:
            raise ServeError(
                f"structspec serve on {prompt.id}: HTTP {resp.status_code} {resp.text[:200]}"
            )
        ext = resp.json().get("structspec") or {}
        out = [int(t) for t in ext.get("tokens") or []]
        decode_s = float(ext.get("decode_ms") or 0.0) / 1000.0
        engine_ms = sum(float(ext.get(k) or 0.0) for k in ("prefill_ms", "draft_ms", "decode_ms"))
        return Run(
            prompt.id,
            SERVE_MODE,
            repeat,
            out,
            seconds,
            decode_s * (len(out) - 1) / len(out) if out else 0.0,
            passes=int(ext.get("passes") or 0),
            drafted=int(ext.get("drafted") or 0),
            accepted=int(ext.get("accepted") or 0),
            engine_seconds=engine_ms / 1000.0,
        )

    def close(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()

    def _last_words(self) -> str:
        """The last line the server wrote to stderr (why it stopped), or nothing."""
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return f": {lines[-1]}" if lines else ""
