"""Tiny llama-architecture GGUFs with the FIM vocabularies of real code-model families.

Random weights (the tests look at prompts and the KV cache, never at what the
model writes), a tokenizer llama.cpp loads for real: byte-level BPE for the
Qwen2.5-Coder and StarCoder2 spellings, SentencePiece with byte fallback for
CodeLlama's. Written in a second or so; nothing is committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

gguf = __import__("pytest").importorskip("gguf")

#: Special tokens of each family, in the order they get ids after the base vocabulary.
FAMILIES: dict[str, dict[str, str]] = {
    "qwen": {
        "eos": "<|endoftext|>",
        "pre": "<|fim_prefix|>",
        "suf": "<|fim_suffix|>",
        "mid": "<|fim_middle|>",
        "pad": "<|fim_pad|>",
        "repo": "<|repo_name|>",
        "sep": "<|file_sep|>",
    },
    "starcoder": {
        "eos": "<|endoftext|>",
        "pre": "<fim_prefix>",
        "suf": "<fim_suffix>",
        "mid": "<fim_middle>",
        "pad": "<fim_pad>",
        "repo": "<repo_name>",
        "sep": "<file_sep>",
    },
    "codellama": {"pre": "▁<PRE>", "suf": "▁<SUF>", "mid": "▁<MID>", "eot": "▁<EOT>"},
}

_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in character for each byte (byte-level BPE vocabularies)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars: dict[int, str] = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


@dataclass(frozen=True)
class TinyVocab:
    """Where a family's special tokens landed: ``ids[name]`` by the names of ``FAMILIES``."""

    path: Path
    family: str
    ids: dict[str, int]
    bos: int | None


def write_tiny_fim_gguf(
    path: Path,
    family: str,
    *,
    seed: int = 0,
    head: str = "f32",
    softcap: float = 0.0,
    layers: str = "f32",
) -> TinyVocab:
    """A loadable llama GGUF with ``family``'s FIM vocabulary at ``path``.

    ``head``: how the output matrix is stored: ``"f32"``, ``"q8_0"``,
    ``"tied-q8_0"`` (no ``output.weight``: the token embedding in Q8_0 serves
    as the head, as in Gemma), or ``"q6_k"`` (then the embedding is 256 wide,
    one Q6_K super-block). ``softcap``: a ``final_logit_softcapping`` value
    to record (the llama graph ignores it; structspec's head must not).
    ``layers``: how the layers' matrices are stored, ``"f32"`` or ``"q5_0"``
    (the type ``model/widen.py`` widens).
    """
    specials = FAMILIES[family]
    w = gguf.GGUFWriter(str(path), "llama")
    n_embd, n_ff, n_head, n_layer, n_ctx = 256 if head == "q6_k" else 32, 64, 2, 1, 2048
    w.add_name(f"tiny-{family}")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if softcap:
        w.add_float32("llama.final_logit_softcapping", softcap)
    ids: dict[str, int] = {}
    if family == "codellama":
        tokens = ["<unk>", "<s>", "</s>"]
        types = [_UNKNOWN, _CONTROL, _CONTROL]
        tokens += [f"<0x{b:02X}>" for b in range(256)]
        types += [_BYTE] * 256
        normal = ["▁", *(chr(c) for c in range(ord("!"), ord("~") + 1)), "▁return", "▁def"]
        tokens += normal
        types += [_NORMAL] * len(normal)
        for name, text in specials.items():
            ids[name] = len(tokens)
            tokens.append(text)
            types.append(_CONTROL)
        scores = [0.0] * len(tokens)
        for i in range(259, len(tokens)):
            scores[i] = -float(i) if types[i] == _NORMAL else 0.0
        scores[tokens.index("▁return")] = 0.0
        scores[tokens.index("▁def")] = 0.0
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_scores(scores)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_space_prefix(True)
        bos: int | None = 1
    else:
        tokens = _byte_chars()
        types = [_NORMAL] * 256
        merges = ["Ġ Ġ", "ĠĠ ĠĠ", "r e", "re t", "d e", "de f"]
        for merge in merges:
            tokens.append(merge.replace(" ", ""))
            types.append(_NORMAL)
        for name, text in specials.items():
            ids[name] = len(tokens)
            tokens.append(text)
            types.append(_CONTROL)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2" if family == "qwen" else "starcoder")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_eos_token_id(ids["eos"])
        w.add_add_bos_token(False)
        bos = None
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def q8_0(name: str, array: np.ndarray) -> None:
        q8 = gguf.GGMLQuantizationType.Q8_0
        w.add_tensor(name, gguf.quants.quantize(array, q8), raw_dtype=q8)

    def matrix(name: str, array: np.ndarray) -> None:
        if layers == "q5_0":
            q5 = gguf.GGMLQuantizationType.Q5_0
            w.add_tensor(name, gguf.quants.quantize(array * 20, q5), raw_dtype=q5)
        else:
            w.add_tensor(name, array)

    # The output matrix is scaled up so the logits spread over several units:
    # a kernel that reads the wrong row or scale cannot hide in the rounding.
    embedding = weight(n_vocab, n_embd)
    if head == "tied-q8_0":
        q8_0("token_embd.weight", embedding * 50)
    else:
        w.add_tensor("token_embd.weight", embedding)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    if head == "q8_0":
        q8_0("output.weight", weight(n_vocab, n_embd) * 50)
    elif head == "q6_k":
        q6 = gguf.GGMLQuantizationType.Q6_K
        w.add_tensor("output.weight", random_q6_k(rng, n_vocab, n_embd), raw_dtype=q6)
    elif head == "f32":
        w.add_tensor("output.weight", weight(n_vocab, n_embd))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            matrix(f"blk.{i}.{name}.weight", weight(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        matrix(f"blk.{i}.ffn_gate.weight", weight(n_ff, n_embd))
        matrix(f"blk.{i}.ffn_up.weight", weight(n_ff, n_embd))
        matrix(f"blk.{i}.ffn_down.weight", weight(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return TinyVocab(path, family, ids, bos)


def random_q6_k(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """ggml's Q6_K bytes of a random ``rows x cols`` matrix (``gguf`` cannot quantize to Q6_K).

    Any ``ql``/``qh``/``scales`` bytes with a finite fp16 ``d`` are a valid
    super-block (210 bytes: ql[128], qh[64], int8 scales[16], d). ``d`` is
    chosen so that the weights are about 1 in size (|q| ~ 18, |scale| ~ 74).
    """
    blocks = rng.integers(0, 256, size=(rows, cols // 256, 210), dtype=np.uint8)
    d = (rng.random((rows, cols // 256)) * 5e-4 + 5e-4).astype(np.float16)
    blocks[:, :, 208:] = d.view(np.uint8).reshape(rows, cols // 256, 2)
    return blocks.reshape(rows, -1)
