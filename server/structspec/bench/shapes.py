"""Model shapes: what the code models people run cost on this machine (speed only).

``python -m structspec.bench.shapes [--shape NAME ...] [--cache-dir D] [--quantize PATH]
--json-out F --markdown-out F``

No real code GGUF can be installed here, but its cost can: a GGUF with the
real architecture, hyper-parameters, vocabulary size and quantization mix and
*random* weights costs what the real one costs to evaluate. The suite:

1. builds each shape once into a cache directory (``build_shape``): the
   ``gguf`` package writes Q8_0 with random weights and a synthetic byte-level
   BPE tokenizer of the real vocabulary size that carries the model's special
   and FIM tokens under their real names (llama.cpp finds the FIM layout by
   name), then llama.cpp's own ``llama-quantize`` requantizes it to Q4_K_M,
   which gives the head type those releases have (Q6_K: ``output.weight``, or
   ``token_embd.weight`` where the model ties them);
2. measures each shape and the default model in a child process of its own
   (``measure_model``: a clean peak RSS, and one shape that crashes llama.cpp
   does not take the others with it): load time, peak RSS, prompt tokens/s,
   decode tokens/s (one row per pass), the verification cost table (1-16
   rows) with the head structspec uses and, where that is its own kernel,
   with llama.cpp's head beside;
3. replays the recorded greedy outputs (``bench/replay.py``; the recordings
   are of the default model, so the acceptance is that model's) under each
   shape's cost table: the speed-up speculation would give at that cost;
4. ``window_tokens``: the prompt window the machine evaluates in
   ``WINDOW_SECONDS`` at the measured prompt rate, at most the default
   ``windowTokens``.

The weights are random: the figures say what a pass costs, nothing about the
quality of a suggestion.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from structspec.config import Settings

#: A new place should be warm within this many seconds (the window's budget).
WINDOW_SECONDS = 2.0
#: The cost table's row counts (``runtime.measure_verify_cost``).
ROWS = 16

# Token types of the GGUF tokenizer (``gguf.TokenType``; llama.cpp's llama_token_type).
_NORMAL, _CONTROL, _UNUSED = 1, 3, 5

_QWEN_SPECIALS = (
    # Qwen2.5-Coder's tokenizer_config.json "added_tokens_decoder" (ids 151643-151664;
    # the tool-call tokens 151657-151658 are ordinary added tokens and left out).
    (151643, "<|endoftext|>"),
    (151644, "<|im_start|>"),
    (151645, "<|im_end|>"),
    (151659, "<|fim_prefix|>"),
    (151660, "<|fim_middle|>"),
    (151661, "<|fim_suffix|>"),
    (151662, "<|fim_pad|>"),
    (151663, "<|repo_name|>"),
    (151664, "<|file_sep|>"),
)
#: Qwen's tokenizer ends at 151664; the embedding rows past it are padding.
_QWEN_TOKENS = 151665


@dataclass(frozen=True)
class Shape:
    """A model's architecture and hyper-parameters, and its tokenizer's special tokens.

    ``specials``: (id, text) of each control token, by its real id and name;
    ``n_tokens``: where the tokenizer's own tokens end (the embedding rows
    past it, up to ``n_vocab``, are padding, as in the real file).
    """

    name: str
    arch: str  # GGUF general.architecture
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    rope_theta: float
    norm_eps: float
    tied: bool  # output head = token embedding (no output.weight)
    n_ctx_train: int
    pre: str  # tokenizer.ggml.pre: llama.cpp's pre-tokenizer
    specials: tuple[tuple[int, str], ...]
    bos: int
    eos: int
    add_bos: bool
    n_tokens: int = 0  # 0: n_vocab
    rope_linear: float = 0.0  # linear RoPE scaling factor (0: none)
    source: str = ""

    @property
    def real_tokens(self) -> int:
        return self.n_tokens or self.n_vocab

    def tiny(self, *, n_vocab: int = 600) -> Shape:
        """The same architecture and tokenizer layout at toy sizes (a test's GGUF).

        Special tokens keep their names and order; those past the start of the
        vocabulary move to ``n_vocab - 100`` onwards.
        """
        first = self.specials[0][0]
        base = 0 if first == 0 else n_vocab - 100
        specials = tuple((base + i - first, text) for i, text in self.specials)
        shift = base - first
        return replace(
            self,
            name=f"tiny-{self.arch}",
            n_layer=2,
            n_embd=64,
            n_ff=128,
            n_head=4,
            n_head_kv=2,
            n_vocab=n_vocab,
            n_tokens=0 if not self.n_tokens else self.n_tokens + shift,
            specials=specials,
            bos=self.bos + shift,
            eos=self.eos + shift,
            n_ctx_train=1024,
        )


def _qwen(
    name: str, layers: int, embd: int, ff: int, heads: int, kv: int, vocab: int, tied: bool
) -> Shape:
    return Shape(
        name=name,
        arch="qwen2",
        n_layer=layers,
        n_embd=embd,
        n_ff=ff,
        n_head=heads,
        n_head_kv=kv,
        n_vocab=vocab,
        rope_theta=1_000_000.0,
        norm_eps=1e-6,
        tied=tied,
        n_ctx_train=32768,
        pre="qwen2",
        specials=_QWEN_SPECIALS,
        bos=151643,
        eos=151643,
        add_bos=False,
        n_tokens=_QWEN_TOKENS,
        source=f"Qwen/{name} config.json (hidden_size, intermediate_size, num_hidden_layers, "
        "num_attention_heads, num_key_value_heads, vocab_size, rope_theta, rms_norm_eps, "
        "tie_word_embeddings)",
    )


#: The shapes, by name. Sources: each model's Hugging Face config.json (the
#: fields named in ``source``) and tokenizer_config.json (the special tokens).
SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        # Qwen2.5-Coder-0.5B: 896 x 24 layers, 14 heads / 2 KV, ff 4864, tied.
        _qwen("Qwen2.5-Coder-0.5B", 24, 896, 4864, 14, 2, 151936, True),
        # Qwen2.5-Coder-1.5B: 1536 x 28, 12 / 2, ff 8960, tied.
        _qwen("Qwen2.5-Coder-1.5B", 28, 1536, 8960, 12, 2, 151936, True),
        # Qwen2.5-Coder-3B: 2048 x 36, 16 / 2, ff 11008, tied.
        _qwen("Qwen2.5-Coder-3B", 36, 2048, 11008, 16, 2, 151936, True),
        # Qwen2.5-Coder-7B: 3584 x 28, 28 / 4, ff 18944, vocab 152064, not tied.
        _qwen("Qwen2.5-Coder-7B", 28, 3584, 18944, 28, 4, 152064, False),
        Shape(
            # bigcode/starcoder2-3b config.json: hidden 3072, 30 layers, 24 heads / 2 KV,
            # intermediate 12288, vocab 49152, rope_theta 999999.442, LayerNorm eps 1e-5,
            # biases everywhere (use_bias), no tie_word_embeddings key (the default: tied);
            # tokenizer: <|endoftext|> and the FIM tokens at ids 0-6.
            name="StarCoder2-3B",
            arch="starcoder2",
            n_layer=30,
            n_embd=3072,
            n_ff=12288,
            n_head=24,
            n_head_kv=2,
            n_vocab=49152,
            rope_theta=999999.4420358813,
            norm_eps=1e-5,
            tied=True,
            n_ctx_train=16384,
            pre="starcoder",
            specials=(
                (0, "<|endoftext|>"),
                (1, "<fim_prefix>"),
                (2, "<fim_middle>"),
                (3, "<fim_suffix>"),
                (4, "<fim_pad>"),
                (5, "<repo_name>"),
                (6, "<file_sep>"),
            ),
            bos=0,
            eos=0,
            add_bos=False,
            source="bigcode/starcoder2-3b config.json",
        ),
        Shape(
            # deepseek-ai/deepseek-coder-1.3b-base config.json (LlamaForCausalLM): hidden 2048,
            # 24 layers, 16 heads / 16 KV, intermediate 5504, vocab 32256, rope_theta 100000
            # with linear scaling x4, rms_norm_eps 1e-6, not tied; tokenizer: 32000 BPE
            # tokens, then <｜begin▁of▁sentence｜> 32013 ... <｜fim▁end｜> 32017; adds BOS.
            name="DeepSeek-Coder-1.3B",
            arch="llama",
            n_layer=24,
            n_embd=2048,
            n_ff=5504,
            n_head=16,
            n_head_kv=16,
            n_vocab=32256,
            rope_theta=100000.0,
            norm_eps=1e-6,
            tied=False,
            n_ctx_train=16384,
            pre="deepseek-coder",
            specials=(
                (32013, "<｜begin▁of▁sentence｜>"),
                (32014, "<｜end▁of▁sentence｜>"),
                (32015, "<｜fim▁hole｜>"),
                (32016, "<｜fim▁begin｜>"),
                (32017, "<｜fim▁end｜>"),
            ),
            bos=32013,
            eos=32014,
            add_bos=True,
            n_tokens=32022,
            rope_linear=4.0,
            source="deepseek-ai/deepseek-coder-1.3b-base config.json",
        ),
    )
}
#: ``--shape default``: the embedded default model, measured beside the shapes.
DEFAULT = "default"


# -- the synthetic tokenizer ------------------------------------------------
def _byte_chars() -> list[str]:
    """GPT-2's byte-to-character map: the text of byte-level BPE token ``b``."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    chars: dict[int, str] = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def synthetic_vocab(shape: Shape) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges of a byte-level BPE vocabulary of ``shape.n_vocab``.

    The 256 byte tokens, then merges of printable ASCII and white space into
    pairs, then triples (so every token is reachable and code tokenizes into
    a few bytes per token), the special tokens at their real ids, and
    ``[PAD<i>]`` past the tokenizer's end, as the real conversions pad.
    """
    taken = dict(shape.specials)
    tokens: list[str | None] = [None] * shape.n_vocab
    types = [_NORMAL] * shape.n_vocab
    for i, text in taken.items():
        tokens[i], types[i] = text, _CONTROL
    for i in range(shape.real_tokens, shape.n_vocab):
        if tokens[i] is None:
            tokens[i], types[i] = f"[PAD{i}]", _UNUSED
    byte = _byte_chars()
    alphabet = [byte[b] for b in (32, 10, 9, *range(33, 127))]
    free = (i for i in range(shape.n_vocab) if tokens[i] is None)
    merges: list[str] = []

    def pieces() -> Iterator[tuple[str, str]]:
        yield from ((c, "") for c in byte)
        yield from ((a, b) for a in alphabet for b in alphabet)
        yield from ((a + b, c) for a in alphabet for b in alphabet for c in alphabet)

    for (left, right), slot in zip(pieces(), free, strict=False):
        tokens[slot] = left + right
        if right:
            merges.append(f"{left} {right}")
    missing = [i for i, t in enumerate(tokens) if t is None]
    for i in missing:  # more tokens than pieces: unreachable, but distinct
        tokens[i] = f"[UNUSED{i}]"
        types[i] = _UNUSED
    return [t or "" for t in tokens], types, merges


# -- the GGUF -----------------------------------------------------------------
def _q8_0(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q8_0 blocks (an f16 scale and 32 int8 each): weights of std about 0.02."""
    blocks = cols // 32
    data = np.empty((rows, blocks, 34), dtype=np.uint8)
    data[:, :, :2] = np.frombuffer(np.float16(0.02 / 73.0).tobytes(), dtype=np.uint8)
    data[:, :, 2:] = rng.integers(0, 256, size=(rows, blocks, 32), dtype=np.uint8)
    return data.reshape(rows, blocks * 34)


def _tensors(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """The GGUF tensors of ``shape``: (name, (rows, cols)) or (name, (n,)) for vectors."""
    e, ff, hd = shape.n_embd, shape.n_ff, shape.n_embd // shape.n_head
    kv = shape.n_head_kv * hd
    biased = shape.arch == "starcoder2"  # use_bias: every linear and norm has one
    qkv_bias = biased or shape.arch == "qwen2"
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (shape.n_vocab, e))]
    out.append(("output_norm.weight", (e,)))
    if biased:
        out.append(("output_norm.bias", (e,)))
    if not shape.tied:
        out.append(("output.weight", (shape.n_vocab, e)))
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        layer: list[tuple[str, tuple[int, ...]]] = [
            (b + "attn_norm.weight", (e,)),
            (b + "attn_q.weight", (e, e)),
            (b + "attn_k.weight", (kv, e)),
            (b + "attn_v.weight", (kv, e)),
            (b + "attn_output.weight", (e, e)),
            (b + "ffn_norm.weight", (e,)),
            (b + "ffn_up.weight", (ff, e)),
            (b + "ffn_down.weight", (e, ff)),
        ]
        if shape.arch != "starcoder2":  # SwiGLU; StarCoder2's MLP is up, GELU, down
            layer.append((b + "ffn_gate.weight", (ff, e)))
        if qkv_bias:
            layer += [
                (b + "attn_q.bias", (e,)),
                (b + "attn_k.bias", (kv,)),
                (b + "attn_v.bias", (kv,)),
            ]
        if biased:
            layer += [
                (b + "attn_norm.bias", (e,)),
                (b + "attn_output.bias", (e,)),
                (b + "ffn_norm.bias", (e,)),
                (b + "ffn_up.bias", (ff,)),
                (b + "ffn_down.bias", (e,)),
            ]
        out += layer
    return out


def write_gguf(shape: Shape, path: Path, *, seed: int = 0) -> None:
    """Write ``shape`` with random Q8_0 weights and the synthetic tokenizer to ``path``.

    Norm weights are ones and biases zeros (F32), as a freshly initialised
    model has them; the matrices are random.
    """
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), shape.arch)
    w.add_name(f"{shape.name} (random weights, structspec shapes)")
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_vocab_size(shape.n_vocab)
    if shape.arch == "starcoder2":
        w.add_layer_norm_eps(shape.norm_eps)
    else:
        w.add_layer_norm_rms_eps(shape.norm_eps)
    if shape.rope_linear:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(shape.rope_linear)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    tokens, types, merges = synthetic_vocab(shape)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(shape.pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(shape.bos)
    w.add_eos_token_id(shape.eos)
    w.add_add_bos_token(shape.add_bos)
    for name, dims in _tensors(shape):
        if len(dims) == 1:
            fill = 1.0 if name.endswith("norm.weight") else 0.0
            w.add_tensor(name, np.full(dims, fill, dtype=np.float32))
        else:
            w.add_tensor(name, _q8_0(rng, *dims), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def default_cache_dir() -> Path:
    """``shapes`` in structspec's cache folder (its platform default where caching is off)."""
    from structspec.model.prefix_cache import cache_home, default_cache_home

    return (cache_home() or default_cache_home()) / "shapes"


def shape_path(shape: Shape, cache_dir: Path) -> Path:
    return cache_dir / f"{shape.name}-random-Q4_K_M.gguf"


class ShapeError(RuntimeError):
    """A shape that could not be built or measured (one line for the user)."""


def build_shape(shape: Shape, cache_dir: Path, quantize: str | None) -> Path:
    """The shape's Q4_K_M GGUF in ``cache_dir``, built once (an existing file is kept).

    Q8_0 from the ``gguf`` package, then ``quantize`` (llama.cpp's
    ``llama-quantize``) to Q4_K_M; both written under temporary names and
    renamed, so an interrupted build leaves no file that looks finished.
    """
    out = shape_path(shape, cache_dir)
    if out.is_file():
        return out
    if not quantize:
        raise ShapeError(f"{shape.name} is not built and no llama-quantize was given")
    cache_dir.mkdir(parents=True, exist_ok=True)
    q8 = cache_dir / f".{shape.name}-Q8_0.{os.getpid()}.gguf"
    tmp = cache_dir / f".{out.name}.{os.getpid()}.tmp"
    try:
        write_gguf(shape, q8)
        # Q8_0 in, so --allow-requantize; Q4_K_M's own rules pick the head type (Q6_K).
        cmd = [quantize, "--allow-requantize", str(q8), str(tmp), "Q4_K_M"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ShapeError(f"llama-quantize failed on {shape.name}: {tail[0]}")
        os.replace(tmp, out)
    finally:
        for p in (q8, tmp):
            p.unlink(missing_ok=True)
    return out


# -- measuring one model (in a child process) -------------------------------
_TEXT = (
    "def fibonacci(n: int) -> list[int]:\n"
    '    """The first n Fibonacci numbers."""\n'
    "    a, b = 0, 1\n    out = []\n    for _ in range(n):\n"
    "        out.append(a)\n        a, b = b, a + b\n    return out\n\n\n"
)


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure_model(
    path: str, *, threads: int, prompt_tokens: int, decode_tokens: int
) -> dict[str, Any]:
    """Load time, peak RSS, prompt and decode rates and the cost table(s) of one GGUF.

    ``path`` empty: the default model.
    """
    from structspec.model.llama import LlamaModel
    from structspec.model.paths import default_model_path
    from structspec.runtime import measure_verify_cost

    file = Path(path) if path else default_model_path()
    t0 = time.perf_counter()
    model = LlamaModel.load(file, n_ctx=4096, threads=threads)
    load_s = time.perf_counter() - t0
    tokens = model.tokenize(_TEXT * 64)[:prompt_tokens]
    model.prefill(tokens[:16])  # warm-up: the first decode pages the weights in
    model.truncate(0)
    t0 = time.perf_counter()
    model.prefill(tokens)
    prompt_s = time.perf_counter() - t0
    token = tokens[-1]
    t0 = time.perf_counter()
    for _ in range(decode_tokens):
        token = int(model.verify([token]).argmax[0])
    decode_s = time.perf_counter() - t0
    verify = {model.head: list(measure_verify_cost(model).ms)}
    if model.head != "llama.cpp":
        with model.llama_cpp_head():
            verify["llama.cpp"] = list(measure_verify_cost(model).ms)
    result = {
        "model": file.name,
        "file_mb": file.stat().st_size / 2**20,
        "n_embd": model.n_embd,
        "n_vocab": model.n_vocab,
        "fim": model.fim_tokens() is not None,
        "load_s": load_s,
        "prompt_tokens": len(tokens),
        "prompt_tps": len(tokens) / prompt_s,
        "decode_tokens": decode_tokens,
        "decode_tps": decode_tokens / decode_s,
        "head": model.head,
        "verify_ms": verify,
    }
    model.close()
    result["rss_mb"] = _peak_rss_mb()
    return result


def _measure_in_child(path: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "structspec.bench.shapes", "--measure", path or DEFAULT,
        "--threads", str(args.threads), "--prompt-tokens", str(args.prompt_tokens),
        "--decode-tokens", str(args.decode_tokens),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ShapeError(f"measuring {path or DEFAULT} failed: {tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# -- prediction and the window ----------------------------------------------
def window_tokens(prompt_tps: float, default: int = Settings().window_tokens) -> int:
    """The window evaluated within ``WINDOW_SECONDS`` at ``prompt_tps``, at most ``default``."""
    return max(0, min(default, int(prompt_tps * WINDOW_SECONDS)))


def predicted_speedups(
    tables: dict[str, Sequence[float]], recordings: Sequence[Path]
) -> dict[str, dict[str, float]]:
    """Per table name, per recording: the speed-up the replay predicts under that table.

    The recordings are of the default model (its tokenizer is opened for the
    sources); the engine is the default settings' (``runtime.assemble_engine``).
    """
    from structspec.bench.replay import Recording, replay
    from structspec.engine.control import CostModel
    from structspec.runtime import assemble_engine, open_model

    if not recordings:
        return {}
    settings = Settings()
    vocab = open_model("", context_size=256, threads=1)
    loaded = [(p, Recording.load(p)) for p in recordings]
    out: dict[str, dict[str, float]] = {}
    for name, ms in tables.items():
        cost = CostModel(tuple(ms))
        out[name] = {
            p.name: replay(
                rec, vocab, lambda m, c: assemble_engine(m, settings, c), cost=cost
            ).speedup
            for p, rec in loaded
            if rec.model == vocab.name
        }
    return out


# -- the report ---------------------------------------------------------------
def machine() -> dict[str, Any]:
    from structspec.runtime import cpu_name

    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average": load}


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown (what ``docs/BENCHMARKS-shapes.md`` is)."""
    m = report["machine"]
    load = ", ".join(f"{v:.2f}" for v in m.get("load_average", [])) or "unknown"
    end = ", ".join(f"{v:.2f}" for v in m.get("load_average_after", [])) or "unknown"
    lines = [
        "# Model shapes: what a pass costs",
        "",
        "**The weights are random: these figures are speed only, and say nothing about the "
        "quality of a suggestion.** Each shape is a GGUF with the real architecture, sizes, "
        "vocabulary size and special/FIM tokens of the model it is named after, "
        "quantized to Q4_K_M by llama.cpp's `llama-quantize` (the head type it gives is "
        "the one those releases have), so it costs what the real model costs to evaluate. "
        "`default` is the embedded default model itself (real weights), measured alike.",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['cores']} CPUs, {report['threads']} threads; "
        f"load average (1, 5, 15 min) {load} at the start, {end} at the end"
        + (
            " (other processes shared the cores: the rates are lower than on an idle machine)"
            if m.get("load_average") and m["load_average"][0] > (m["cores"] or 1)
            else ""
        )
        + ".",
        "",
        f"Prompt rate: {report['prompt_tokens']} prompt tokens in one prefill; decode rate: "
        f"{report['decode_tokens']} tokens, one row per pass; `window` = the prompt tokens "
        f"evaluated in {WINDOW_SECONDS:g} s at that rate, at most the default `windowTokens`; "
        "`predicted speed-up`: the replay of the recorded greedy outputs of the default model "
        f"({', '.join(report['recordings']) or 'none'}) under the shape's cost table.",
        "",
        "| model | file MB | load s | peak RSS MB | prompt tok/s | decode tok/s | head | "
        "window | predicted speed-up |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in report["shapes"].items():
        if "error" in r:
            lines.append(f"| {name} | {r['error']} |  |  |  |  |  |  |  |")
            continue
        by = r.get("predicted_speedup_by_recording", {})
        speed = ", ".join(f"{v:.2f}x" for v in by.values()) or "n/a"
        lines.append(
            f"| {name} | {r['file_mb']:.0f} | {r['load_s']:.1f} | {r['rss_mb']:.0f} | "
            f"{r['prompt_tps']:.1f} | {r['decode_tps']:.1f} | {r['head']} | "
            f"{r['window_tokens']} | {speed} |"
        )
    measured = {n: r for n, r in report["shapes"].items() if "error" not in r}
    if measured:
        columns = [(n, h) for n, r in measured.items() for h in r["verify_ms"]]
        lines += [
            "",
            "Verification cost per pass, ms (median of 5, row counts interleaved), by head:",
            "",
            "| rows | " + " | ".join(f"{n} ({h})" for n, h in columns) + " |",
            "| --- |" + " --- |" * len(columns),
        ]
        for row in range(ROWS):
            cells = [f"{measured[n]['verify_ms'][h][row]:.1f}" for n, h in columns]
            lines.append(f"| {row + 1} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "`head`: the code that computes a verification pass's logits (`model/head.py` "
            "takes a Q8_0 head; any other head type keeps llama.cpp's).",
        ]
    return "\n".join(lines) + "\n"


# -- the command ----------------------------------------------------------------
_BUILD_HINT = (
    "llama-quantize not found: build it from llama.cpp (cmake -B build && cmake --build build "
    "--target llama-quantize) and pass --quantize build/bin/llama-quantize"
)


def _recordings_default() -> list[Path]:
    data = Path(__file__).resolve().parents[3] / "tests" / "data"
    names = ("humaneval-40x128.replay.json", "editor-python-25.replay.json")
    return [data / n for n in names if (data / n).is_file()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m structspec.bench.shapes", description=__doc__)
    names = [*SHAPES, DEFAULT]
    p.add_argument(
        "--shape", action="append", choices=names, help="default: all, and the default model"
    )
    p.add_argument("--cache-dir", default="", help=f"default: {default_cache_dir()}")
    p.add_argument("--quantize", default="", help="llama.cpp's llama-quantize (default: on PATH)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument(
        "--recording",
        action="append",
        default=None,
        help="replay recordings (default: the repository's)",
    )
    p.add_argument("--json-out", default="")
    p.add_argument("--markdown-out", default="")
    p.add_argument("--measure", default="", help=argparse.SUPPRESS)  # the child's job
    return p


def run_shapes(args: argparse.Namespace, command: str) -> int:
    """Build what is missing, measure every selected model, write the JSON and Markdown."""
    import shutil

    selected = args.shape or [*SHAPES, DEFAULT]
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    quantize = args.quantize or shutil.which("llama-quantize") or ""
    missing = [n for n in selected if n != DEFAULT and not shape_path(SHAPES[n], cache).is_file()]
    if missing and not (quantize and os.access(quantize, os.X_OK)):
        print(_BUILD_HINT, file=sys.stderr)
        return 2
    recordings = [Path(r) for r in args.recording] if args.recording else _recordings_default()
    report: dict[str, Any] = {
        "command": command,
        "machine": machine(),
        "threads": args.threads,
        "prompt_tokens": args.prompt_tokens,
        "decode_tokens": args.decode_tokens,
        "recordings": [p.name for p in recordings],
        "random_weights": True,
        "shapes": {},
    }
    failed = False
    for name in selected:
        try:
            if name == DEFAULT:
                path = ""
            else:
                print(
                    f"shapes: building {name} (once)" if name in missing else f"shapes: {name}",
                    file=sys.stderr,
                )
                path = str(build_shape(SHAPES[name], cache, quantize))
            print(f"shapes: measuring {name}", file=sys.stderr)
            r = _measure_in_child(path, args)
        except (ShapeError, OSError, ValueError) as exc:
            print(f"shapes: {exc}", file=sys.stderr)
            report["shapes"][name] = {"error": str(exc)}
            failed = True
            continue
        r["window_tokens"] = window_tokens(r["prompt_tps"])
        report["shapes"][name] = r
    tables = {n: r["verify_ms"][r["head"]] for n, r in report["shapes"].items() if "error" not in r}
    from structspec.bench.replay import ReplayError
    from structspec.model.base import ModelError

    try:
        predicted = predicted_speedups(tables, recordings)
    except (ReplayError, ModelError) as exc:  # a bad recording, no default model
        print(f"shapes: no predicted speed-up: {exc}", file=sys.stderr)
        predicted = {}
    for name, by in predicted.items():
        r = report["shapes"][name]
        r["predicted_speedup_by_recording"] = by
        r["predicted_speedup"] = next(iter(by.values()), None)
    report["machine"]["load_average_after"] = machine()["load_average"]
    text = json.dumps(report, indent=1)
    markdown = render_markdown(report)
    for out, body in ((args.json_out, text), (args.markdown_out, markdown)):
        if out:
            Path(out).write_text(body + ("" if body.endswith("\n") else "\n"), encoding="utf-8")
    print(markdown)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.measure:
        path = "" if args.measure == DEFAULT else args.measure
        r = measure_model(
            path,
            threads=args.threads,
            prompt_tokens=args.prompt_tokens,
            decode_tokens=args.decode_tokens,
        )
        print(json.dumps(r))
        return 0
    argv = sys.argv[1:] if argv is None else list(argv)
    command = "python -m structspec.bench.shapes " + " ".join(shlex.quote(a) for a in argv)
    return run_shapes(args, command.strip())


if __name__ == "__main__":
    raise SystemExit(main())
