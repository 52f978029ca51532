"""structspec's output head (``model/head.py``, ``model/_head.c``).

The kernel is checked on every instruction set this CPU has (each forced as
``STRUCTSPEC_HEAD_ISA`` would) and every type it takes against a NumPy
statement of llama.cpp's arithmetic on random matrices: Q8_0 x Q8_0, and the
Q6_K matrix as the ``gguf`` package dequantizes it times the activations
quantized to q8_K. The eval-callback path on tiny GGUFs whose head is Q8_0
(tied to the embedding or not) or Q6_K, against llama.cpp's own logits for
the same rows; and the fallbacks where the kernel does not apply.
"""

from __future__ import annotations

import ctypes
import logging

import gguf
import llama_cpp
import numpy as np
import pytest
from tests.helpers.fim_gguf import random_q6_k, write_tiny_fim_gguf

from structspec.model import head as native
from structspec.model.base import Interrupt, Interrupted
from structspec.model.llama import LlamaModel

needs_kernel = pytest.mark.skipif(
    not native.kernel_available(),
    reason="the head kernel is not built or the CPU has none of its instruction sets",
)

#: Every instruction set of the kernel, skipped where this CPU lacks it.
EACH_ISA = [
    pytest.param(isa, marks=pytest.mark.skipif(not native.isa_supported(isa), reason=f"no {isa}"))
    for isa in native.ISAS
]


def _random_q8_0(rng: np.random.Generator, rows: int, cols: int):
    """ggml's Q8_0 bytes of a random matrix, with its int8 values and fp16 scales."""
    nb = cols // 32
    q = rng.integers(-127, 128, size=(rows, nb, 32), dtype=np.int8)
    d = (rng.random((rows, nb)) * 0.02 + 1e-3).astype(np.float16)
    raw = np.zeros((rows, nb, 34), np.uint8)
    raw[:, :, :2] = d.view(np.uint8).reshape(rows, nb, 2)
    raw[:, :, 2:] = q.view(np.uint8)
    return raw.reshape(-1), q, d


def _reference_logits(q: np.ndarray, d: np.ndarray, x: np.ndarray) -> np.ndarray:
    """llama.cpp's Q8_0 x Q8_0 product: the rows quantized per block of 32, exact block dots."""
    n, cols = x.shape
    blocks = x.reshape(n, cols // 32, 32)
    amax = np.abs(blocks).max(axis=2)
    dx = (amax / 127).astype(np.float16).astype(np.float64)
    inv = np.divide(127, amax, out=np.zeros_like(amax), where=amax != 0).astype(np.float32)
    qx = np.rint(blocks * inv[:, :, None]).astype(np.int64)  # rint: half to even
    dots = np.einsum("vbk,nbk->nvb", q.astype(np.int64), qx)
    return (dots * (d.astype(np.float64)[None] * dx[:, None, :])).sum(axis=2)


def _reference_q6_k_logits(raw: np.ndarray, x: np.ndarray) -> np.ndarray:
    """llama.cpp's Q6_K x q8_K product: the dequantized matrix times the quantized rows.

    The rows are quantized as ``quantize_row_q8_K``: per 256 values, with ``m``
    the first value of largest magnitude, ``q = rint(x * (-127 / m))`` (at most
    127) and ``d = 1 / (-127 / m)``, both in float32.
    """
    n, cols = x.shape
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q6_K).astype(np.float64)
    blocks = x.reshape(n, cols // 256, 256)
    pick = np.abs(blocks).argmax(axis=2)[:, :, None]
    m = np.take_along_axis(blocks, pick, axis=2)[:, :, 0]
    with np.errstate(divide="ignore"):
        iscale = np.where(m != 0, np.float32(-127) / m, np.float32(0)).astype(np.float32)
        dx = np.where(m != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    qx = np.minimum(np.rint(blocks * iscale[:, :, None]), 127).astype(np.float64)
    xs = (qx * dx[:, :, None].astype(np.float64)).reshape(n, cols)
    return xs @ w.T


def _kernel_case(qtype: int, rows: int, cols: int, n: int, isa: str, seed: int):
    """A random ``qtype`` matrix packed for ``isa``, ``n`` rows of hidden states, the reference."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cols)).astype(np.float32)
    block = 256 if qtype == native.Q6_K else 32
    if cols > block:
        x[0, :block] = 0.0  # an all-zero block: scale 0, no division by it
    if qtype == native.Q6_K:
        raw = random_q6_k(rng, rows, cols)
        want = _reference_q6_k_logits(raw, x)
    else:
        raw, q, d = _random_q8_0(rng, rows, cols)
        want = _reference_logits(q, d, x)
    return native.NativeHead.from_blocks(raw, qtype, rows, cols, isa), x, want


@needs_kernel
@pytest.mark.parametrize("isa", EACH_ISA)
@pytest.mark.parametrize(
    ("qtype", "rows", "cols", "n"),
    [
        (native.Q8_0, 16, 32, 1),
        (native.Q8_0, 37, 64, 3),
        (native.Q8_0, 1000, 640, 9),
        (native.Q8_0, 160, 96, 8),
        (native.Q8_0, 17, 32, 16),
        (native.Q8_0, 5, 128, 2),
        (native.Q8_0, 1605, 32, 3),  # threads take chunks of 512 rows: 4 here, the last partial
        (native.Q6_K, 16, 256, 1),
        (native.Q6_K, 37, 512, 3),
        (native.Q6_K, 1000, 256, 9),
        (native.Q6_K, 160, 768, 8),
        (native.Q6_K, 17, 256, 16),
        (native.Q6_K, 5, 512, 2),
        (native.Q6_K, 1605, 256, 2),
    ],
)
def test_kernel_computes_llama_cpp_logits(isa, qtype, rows, cols, n):
    """Partial last groups (rows not a multiple of 16), 1-16 rows, 1-3 threads."""
    head, x, want = _kernel_case(qtype, rows, cols, n, isa, seed=rows * 7 + n)
    assert head.isa == isa
    assert np.abs(want).max() > 1.0  # the check below is not against zeros
    for threads in (1, 2, 3):
        got = head.logits(x, threads).copy()
        assert got.shape == (n, rows)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


@needs_kernel
@pytest.mark.parametrize("isa", EACH_ISA)
@pytest.mark.parametrize("qtype", [native.Q8_0, native.Q6_K])
def test_every_row_count_from_1_to_16(isa, qtype):
    """Every tile remainder of both vector widths (tiles of 8 and 4 rows)."""
    cols = 256 if qtype == native.Q6_K else 64
    for n in range(1, 17):
        head, x, want = _kernel_case(qtype, 45, cols, n, isa, seed=n)
        got = head.logits(x, 2)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


@needs_kernel
def test_the_environment_forces_an_instruction_set(monkeypatch, caplog):
    monkeypatch.delenv("STRUCTSPEC_HEAD_ISA", raising=False)
    best = native.chosen_isa()
    assert best == next(isa for isa in native.ISAS if native.isa_supported(isa))
    for isa in native.ISAS:
        monkeypatch.setenv("STRUCTSPEC_HEAD_ISA", isa.upper())
        assert native.chosen_isa() == (isa if native.isa_supported(isa) else None)
    rng = np.random.default_rng(4)
    raw, _, _ = _random_q8_0(rng, 16, 64)
    monkeypatch.setenv("STRUCTSPEC_HEAD_ISA", "avx2")
    assert native.NativeHead.from_blocks(raw, native.Q8_0, 16, 64).isa == "avx2"
    monkeypatch.setenv("STRUCTSPEC_HEAD_ISA", "neon")
    with caplog.at_level(logging.WARNING, logger=native.log.name):
        assert native.chosen_isa() is None
        assert not native.kernel_available()
    assert "STRUCTSPEC_HEAD_ISA=neon is none of avx512, avxvnni, avx2" in caplog.text


@needs_kernel
def test_head_buffer_is_reused_and_rows_past_the_last_call_are_not_returned():
    rng = np.random.default_rng(1)
    raw, q, d = _random_q8_0(rng, 48, 64)
    head = native.NativeHead.from_blocks(raw, native.Q8_0, 48, 64)
    big = head.logits(rng.standard_normal((5, 64)).astype(np.float32), 2)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    small = head.logits(x, 2)
    assert small.shape == (2, 48)
    assert np.shares_memory(big, small)
    np.testing.assert_allclose(small, _reference_logits(q, d, x), atol=1e-4 * 50)


@needs_kernel
def test_the_kernel_stops_when_its_flag_is_set():
    rng = np.random.default_rng(3)
    raw, q, d = _random_q8_0(rng, 4000, 64)
    head = native.NativeHead.from_blocks(raw, native.Q8_0, 4000, 64)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    flag = Interrupt()
    got = head.logits(x, 2, flag.address)
    assert got is not None  # not set: the whole product
    np.testing.assert_allclose(got, _reference_logits(q, d, x), atol=1e-4 * np.abs(got).max())
    flag.set()
    assert head.logits(x, 2, flag.address) is None


@needs_kernel
def test_bad_shapes_are_refused():
    rng = np.random.default_rng(2)
    raw, _, _ = _random_q8_0(rng, 16, 64)
    with pytest.raises(ValueError, match="Q8_0 matrix"):
        native.NativeHead.from_blocks(raw[:-34], native.Q8_0, 16, 64)
    with pytest.raises(ValueError, match="Q8_0 matrix"):
        native.NativeHead.from_blocks(raw, native.Q8_0, 16, 48)  # not a whole number of blocks
    q6 = random_q6_k(rng, 4, 512)
    with pytest.raises(ValueError, match="Q6_K matrix"):
        native.NativeHead.from_blocks(q6, native.Q6_K, 8, 512)
    with pytest.raises(ValueError, match="Q6_K matrix"):
        native.NativeHead.from_blocks(q6[:, :210], native.Q6_K, 4, 32)  # not a super-block
    with pytest.raises(ValueError, match="not a 4 x 512 Q4_K matrix"):
        native.NativeHead.from_blocks(q6, 12, 4, 512)  # Q4_K: not a type the kernel takes
    head = native.NativeHead.from_blocks(raw, native.Q8_0, 16, 64)
    with pytest.raises(ValueError, match="expected"):
        head.logits(np.zeros((2, 32), dtype=np.float32), 2)


def _load(path):
    return LlamaModel.load(path, n_ctx=256, threads=2, n_batch=64)


def _llama_cpp_logits(model: LlamaModel, prompt: list[int], rows: list[int]) -> np.ndarray:
    """The rows' logits from llama.cpp's own head, at the positions after ``prompt``."""
    with model.llama_cpp_head():
        model.prefill(prompt)
        logits = np.array(model.verify(rows).logits[:])
        model.truncate(0)
    return logits


@needs_kernel
@pytest.mark.parametrize("isa", EACH_ISA)
@pytest.mark.parametrize("storage", ["q8_0", "tied-q8_0", "q6_k"])
def test_the_head_is_computed_by_the_kernel_and_agrees_with_llama_cpp(
    tmp_path, monkeypatch, storage, isa
):
    monkeypatch.setenv("STRUCTSPEC_HEAD_ISA", isa)
    vocab = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen", head=storage)
    model = _load(vocab.path)
    try:
        assert model.head == "structspec"
        assert model._head is not None and model._head.isa == isa
        prompt = model.tokenize("def f(x):\n    return x")
        rows = model.tokenize(" + 1\n\ndef g(y):", add_bos=False)[:7]
        want = _llama_cpp_logits(model, prompt, rows)
        model.prefill(prompt)
        got = model.verify(rows)
        assert np.ptp(want) > 1.0
        tolerance = 1e-3 * np.abs(want).max()  # the order of float additions, no more
        np.testing.assert_allclose(np.array(got.logits[:]), want, atol=tolerance)
        for i, best in enumerate(got.argmax):  # llama.cpp's argmax, or tied with it
            assert want[i, best] >= want[i].max() - tolerance
        # the KV cache holds the verified rows: the next pass continues after them
        assert list(model.cached_tokens) == [*prompt, *rows]
        follow = np.array(model.verify(rows[:2]).logits[:])
        model.truncate(0)
        model.prefill([*prompt, *rows])
        with model.llama_cpp_head():
            again = np.array(model.verify(rows[:2]).logits[:])
        np.testing.assert_allclose(follow, again, atol=tolerance)
    finally:
        model.close()


@needs_kernel
@pytest.mark.parametrize("storage, qtype", [("q8_0", native.Q8_0), ("q6_k", native.Q6_K)])
def test_a_pass_below_the_kernels_rows_for_its_type_runs_llama_cpps_head(
    tmp_path, monkeypatch, storage, qtype
):
    """One row of a Q6_K head is llama.cpp's, the cheaper there; more rows, the kernel's."""
    monkeypatch.setenv("STRUCTSPEC_HEAD_ISA", "avx2")
    vocab = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen", head=storage)
    model = _load(vocab.path)
    try:
        assert model._head is not None and model._head.min_rows == native.MIN_ROWS[qtype]
        calls: list[int] = []
        kernel = model._head.logits
        monkeypatch.setattr(
            model._head,
            "logits",
            lambda hidden, *a: calls.append(len(hidden)) or kernel(hidden, *a),
        )
        prompt = model.tokenize("def f(x):\n    return x")
        rows = model.tokenize(" + 1\n\ndef g(y):", add_bos=False)[:3]
        for n in (1, 2, 3):
            with model.threads_pinned(2):  # bit for bit below: the same threads for both passes
                want = _llama_cpp_logits(model, prompt, rows[:n])
                model.prefill(prompt)
                got = np.array(model.verify(rows[:n]).logits[:])
                model.truncate(0)
            if n < native.MIN_ROWS[qtype]:
                np.testing.assert_array_equal(got, want)  # llama.cpp's own pass
            else:
                np.testing.assert_allclose(got, want, atol=1e-3 * np.abs(want).max())
        kernel_rows = [n for n in (1, 2, 3) if n >= native.MIN_ROWS[qtype]]
        assert calls == kernel_rows
        calls.clear()
        with model.kernel_every_pass():  # the kernel's own cost, for the reports
            model.prefill(prompt)
            model.verify(rows[:1])
            model.truncate(0)
        assert calls == [1]
    finally:
        model.close()


@needs_kernel
def test_an_interrupt_during_the_head_leaves_the_cache_as_before_the_pass(tmp_path, monkeypatch):
    """Interrupted between the layers and the kernel: ``Interrupted``, no row of the pass kept."""
    vocab = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen", head="q8_0")
    model = _load(vocab.path)
    try:
        assert model.head == "structspec"
        prompt = model.tokenize("def f(x):\n    return x")
        rows = model.tokenize(" + 1\n", add_bos=False)
        model.prefill(prompt)
        want = np.array(model.verify(rows).logits[:])
        model.truncate(len(prompt))
        stop, real = Interrupt(), native.NativeHead.logits

        def interrupted_meanwhile(self, hidden, threads, flag=None):
            stop.set()  # the layers are done: the flag is set as the kernel starts
            return real(self, hidden, threads, flag)

        monkeypatch.setattr(native.NativeHead, "logits", interrupted_meanwhile)
        with model.interrupted_by(stop), pytest.raises(Interrupted):
            model.verify(rows)
        monkeypatch.undo()
        assert list(model.cached_tokens) == prompt
        memory, seq = model._mem, model._slot.seq  # llama.cpp's own KV cache agrees
        assert llama_cpp.llama_memory_seq_pos_max(memory, seq) == len(prompt) - 1
        again = np.array(model.verify(rows).logits[:])  # the KV cache holds no row of that pass
        np.testing.assert_allclose(again, want, atol=1e-3 * np.abs(want).max())
    finally:
        model.close()


def test_llama_cpp_keeps_the_head_where_the_kernel_does_not_apply(tmp_path, monkeypatch):
    f32 = write_tiny_fim_gguf(tmp_path / "f32.gguf", "qwen", head="f32").path
    capped = write_tiny_fim_gguf(tmp_path / "capped.gguf", "qwen", head="q8_0", softcap=30.0).path
    plain = write_tiny_fim_gguf(tmp_path / "plain.gguf", "qwen", head="q8_0").path
    for path in (f32, capped):
        _assert_llama_cpp_head(path)
    monkeypatch.setenv("STRUCTSPEC_HEAD_ISA", "neon")  # not an instruction set of the kernel
    _assert_llama_cpp_head(plain)
    monkeypatch.delenv("STRUCTSPEC_HEAD_ISA")
    monkeypatch.setenv("STRUCTSPEC_NATIVE_HEAD", "0")
    _assert_llama_cpp_head(plain)


@needs_kernel
def test_a_capture_struct_of_another_size_keeps_llama_cpps_head(tmp_path, monkeypatch, caplog):
    """``_Capture`` must mirror ``ss_capture``: a size mismatch is caught at load, not used."""

    class Longer(ctypes.Structure):
        _fields_ = [*native._Capture._fields_, ("extra", ctypes.c_int64)]

    monkeypatch.setattr(native, "_Capture", Longer)
    path = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen", head="q8_0").path
    with caplog.at_level(logging.WARNING, logger=native.log.name):
        _assert_llama_cpp_head(path)
    assert "built with another ss_capture" in caplog.text


def _assert_llama_cpp_head(path) -> None:
    """The model at ``path`` loads with llama.cpp's head, and verifies with it."""
    model = _load(path)
    try:
        assert model.head == "llama.cpp"
        model.prefill(model.tokenize("def"))
        rows = model.tokenize(" f", add_bos=False)
        assert len(model.verify(rows).argmax) == len(rows) > 0
    finally:
        model.close()


@needs_kernel
def test_a_disagreeing_kernel_is_not_used(tmp_path, monkeypatch):
    """The load-time check: logits that differ from llama.cpp's keep llama.cpp's head."""
    path = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen", head="q8_0").path
    real = native.NativeHead.logits

    def off_by_one(self, hidden, threads, stop=None):
        return real(self, hidden, threads, stop) + 1.0

    monkeypatch.setattr(native.NativeHead, "logits", off_by_one)
    _assert_llama_cpp_head(path)


def _fake_ggml(name: bytes, data: np.ndarray):
    """ggml's three accessors over one fake tensor, as ctypes callbacks (the caller keeps them)."""
    text = ctypes.create_string_buffer(name)  # lives with the closure below
    get_name = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda t: ctypes.addressof(text))
    nbytes = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p)(lambda t: data.nbytes)

    def copy(t, dst, offset, size):
        ctypes.memmove(dst, data.ctypes.data + offset, size)

    tensor_get = ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t
    )(copy)
    return get_name, nbytes, tensor_get


@needs_kernel
def test_the_eval_callback_takes_result_norm_and_stops_the_graph_only_when_armed():
    lib = native._kernel()
    eval_cb = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)(
        ctypes.cast(lib.ss_capture_eval, ctypes.c_void_p).value
    )
    states = np.arange(12, dtype=np.float32).reshape(3, 4)
    for name, want_capture in ((b"result_norm", True), (b"ffn_out-17", False)):
        accessors = _fake_ggml(name, states)
        capture = native._Capture(
            *(ctypes.cast(f, ctypes.c_void_p).value for f in accessors), 0, 0, None, 0
        )
        hidden = native.HiddenStates(eval_cb, capture)
        # not armed: the callback wants no tensor, llama.cpp computes as usual
        assert eval_cb(None, True, hidden.user_data) is False
        hidden.arm(3, 4)
        assert eval_cb(None, True, hidden.user_data) is want_capture
        if want_capture:
            # computed: copied, and False ends the graph before the head
            assert eval_cb(None, False, hidden.user_data) is False
            np.testing.assert_array_equal(hidden.take(), states)
        else:
            assert hidden.take() is None
        # armed for another number of rows: the graph runs on, nothing is taken
        hidden.arm(2, 4)
        assert eval_cb(None, True, hidden.user_data) is want_capture
        if want_capture:
            assert eval_cb(None, False, hidden.user_data) is True
        assert hidden.take() is None


def _why_llama_cpp(path) -> str:
    """The model at ``path`` loads with llama.cpp's head: the reason it records."""
    model = _load(path)
    try:
        assert model.head == "llama.cpp"
        return model.head_reason
    finally:
        model.close()


@needs_kernel
@pytest.mark.parametrize("storage, kind", [("q8_0", "Q8_0"), ("q6_k", "Q6_K")])
def test_the_model_records_the_head_type_and_that_the_kernel_covers_it(
    tmp_path, monkeypatch, storage, kind
):
    monkeypatch.setenv("STRUCTSPEC_HEAD_ISA", "avx2")
    path = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen", head=storage).path
    model = _load(path)
    try:
        assert (model.head, model.head_type) == ("structspec", kind)
        assert model.head_reason == f"the kernel covers {kind} (avx2)"
    finally:
        model.close()
    assert native.head_type(path) == kind
    assert native.head_type(tmp_path / "missing.gguf") == ""


@needs_kernel
def test_each_fallback_records_why_llama_cpps_head_is_kept(tmp_path, monkeypatch):
    """``head_reason`` names the cause on every path that keeps llama.cpp's head."""
    f32 = write_tiny_fim_gguf(tmp_path / "f32.gguf", "qwen", head="f32").path
    capped = write_tiny_fim_gguf(tmp_path / "capped.gguf", "qwen", head="q8_0", softcap=30.0).path
    plain = write_tiny_fim_gguf(tmp_path / "plain.gguf", "qwen", head="q8_0").path
    why = _why_llama_cpp(f32)
    assert why == "the kernel does not cover the head type F32 (it takes Q8_0, Q6_K)"
    assert "final_logit_softcapping" in _why_llama_cpp(capped)
    with monkeypatch.context() as m:
        m.setenv("STRUCTSPEC_NATIVE_HEAD", "0")
        assert _why_llama_cpp(plain) == "turned off (STRUCTSPEC_NATIVE_HEAD=0)"
    with monkeypatch.context() as m:
        m.setenv("STRUCTSPEC_HEAD_ISA", "neon")
        assert _why_llama_cpp(plain).startswith("STRUCTSPEC_HEAD_ISA=neon is none of")
    with monkeypatch.context() as m:  # a CPU without AVX2
        m.setattr(native, "isa_supported", lambda isa: False)
        assert _why_llama_cpp(plain).startswith("this CPU has none of the kernel's instruction")
    with monkeypatch.context() as m:  # a checkout where _head.c was never compiled
        m.setattr(native, "_lib", False)
        assert "kernel is not built" in _why_llama_cpp(plain)
    with monkeypatch.context() as m:
        m.setattr(native.HiddenStates, "create", classmethod(lambda cls: None))
        assert "eval callback" in _why_llama_cpp(plain)
    with monkeypatch.context() as m:
        real = native.NativeHead.logits
        m.setattr(
            native.NativeHead,
            "logits",
            lambda self, hidden, threads, stop=None: real(self, hidden, threads, stop) + 1.0,
        )
        assert _why_llama_cpp(plain).startswith("the load-time check failed")
