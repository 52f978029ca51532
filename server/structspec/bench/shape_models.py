"""Model shapes: GGUFs with the real architecture and shapes of code models, random weights.

The builder behind ``bench/shapes.py`` (see its docstring): each ``Shape``
holds a model's real hyper-parameters (with the source of each); ``build_shape``
writes it once into a cache directory: the ``gguf`` package writes Q8_0 with
random weights and a synthetic byte-level BPE tokenizer of the real vocabulary
size that carries the model's special and FIM tokens under their real names,
then llama.cpp's own ``llama-quantize`` requantizes it to Q4_K_M.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

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

    def head_probe(self) -> Shape:
        """The same shape with one layer: its head costs what the real one's does.

        On a 1.5B-7B model a head's share of a pass is a small difference of
        two large, noisy pass times; with one layer it is most of the pass.
        """
        return replace(self, name=f"{self.name}-head", n_layer=1)

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
    # Streamed: the tensors' descriptions first, then each tensor made and
    # written in turn, so that at most one matrix is in memory (a 7B shape is
    # 8 GB at Q8_0).
    q8_0 = gguf.GGMLQuantizationType.Q8_0
    specs = _tensors(shape)
    for name, dims in specs:
        if len(dims) == 1:
            w.add_tensor_info(name, dims, np.dtype(np.float32), dims[0] * 4)
        else:
            rows, cols = dims
            size = rows * (cols // 32) * 34
            w.add_tensor_info(name, (rows, size // rows), np.dtype(np.uint8), size, raw_dtype=q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, dims in specs:
        if len(dims) == 1:
            fill = 1.0 if name.endswith("norm.weight") else 0.0
            w.write_tensor_data(np.full(dims, fill, dtype=np.float32))
        else:
            w.write_tensor_data(_q8_0(rng, *dims))
    w.close()


def default_cache_dir() -> Path:
    """``shapes`` in structspec's cache folder (its platform default where caching is off)."""
    from structspec.files import kept_cache_folder

    return kept_cache_folder("shapes")


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
