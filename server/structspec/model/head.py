"""The output head of a verification pass, computed by structspec's own kernel.

On a CPU the output head dominates a verification pass: every row with logits
multiplies the final hidden state by the ``n_vocab x n_embd`` output matrix
(262,144 x 640 for the default model), and llama.cpp's Q8_0 matrix multiply
streams that matrix once per row for passes of 2 to 7 rows, so a drafted
token costs about what a token decoded alone does (docs/MEASUREMENTS.md §1).
``_head.c`` streams it once per pass: a pass of several rows then costs little
more than a pass of one, and each draft the planner sends is cheaper.

Two pieces, both used by ``LlamaModel``:

- ``HiddenStates``: llama.cpp's eval callback (``cb_eval``, set when the
  context is created) copies the tensor ``result_norm``, the head's input, of
  a decode it is armed for and ends the graph there, so llama.cpp does not run
  its own head for that pass.
- ``NativeHead``: the output matrix, read from the GGUF file and repacked for
  the kernel, and the kernel call: ``logits(hidden, threads)``.

The arithmetic is llama.cpp's own for the matrix's type (Q8_0: hidden states
quantized to Q8_0; Q6_K: to q8_K; exact integer block dot products, the
weights' fp16 scales), stated in ``_head.c``; only the order of the float
additions differs, far below the batch-shape noise of docs/MEASUREMENTS.md §2.
The head is used only where it holds: a Q8_0 or Q6_K output matrix without
logit soft-capping, a CPU with one of the kernel's instruction sets, and a
first pass whose logits match llama.cpp's (``LlamaModel`` checks that at
load). Anywhere else llama.cpp computes the head as before.

A pass of fewer rows than ``MIN_ROWS`` gives for the matrix's type (a Q6_K
head's single row) keeps llama.cpp's head, the cheaper there.

The instruction set is chosen at run time: AVX-512 VNNI, else 256-bit
AVX-VNNI, else AVX2. ``STRUCTSPEC_HEAD_ISA`` (``avx512``, ``avxvnni``,
``avx2``) forces one, so that a machine with AVX-512 measures the path a
laptop takes; a forced one this CPU lacks leaves llama.cpp's head.
``STRUCTSPEC_NATIVE_HEAD=0`` turns the kernel off.

Why a model's head is or is not the kernel's is said in one line
(``NoNativeHead``'s message, ``NativeHead.covers``), kept on the model
(``LlamaModel.head_reason``) for the reports and the status.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from structspec.model.gguf_file import BLOCKS, GGUFHeader, TensorInfo, read_header

log = logging.getLogger(__name__)

Q8_0 = 8  # ggml_type of Q8_0
Q6_K = 14  # ggml_type of Q6_K
#: The types the kernel takes (their blocks: ``gguf_file.BLOCKS``).
KERNEL_TYPES = (Q8_0, Q6_K)
#: The fewest rows of a verification pass whose head the kernel computes, per
#: type; a pass of fewer is left to llama.cpp's head. At one row llama.cpp's
#: Q6_K matrix-vector product is the cheaper: on the five Q6_K code-model
#: shapes of docs/BENCHMARKS-shapes.md (AVX2) the kernel's one-row head cost
#: 1.13-1.44x llama.cpp's (27.3 against 19.0 ms on Qwen2.5-Coder-1.5B), and
#: 0.74x at 4 rows; on Q8_0 it is the cheaper at one row too (0.78-0.86x).
MIN_ROWS: dict[int, int] = {Q8_0: 1, Q6_K: 2}
#: ggml's tensor types by number (``enum ggml_type`` of ggml.h), for the reports.
GGML_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S",
    23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip

#: ``_head.c``'s instruction sets (``SS_ISA_*``), the preferred first.
ISAS: dict[str, int] = {"avx512": 3, "avxvnni": 2, "avx2": 1}

_lib: Any = None  # the loaded kernel library; False once it failed to load

_int, _i64, _ptr, _size = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t
#: ``_head.c``'s functions called from here: result type and argument types.
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "ss_head_packed_bytes": (_size, [_int, _i64, _i64]),
    "ss_head_scratch_bytes": (_size, [_int, _i64, _i64]),
    "ss_head_pack": (_int, [_int, _ptr, _i64, _i64, _ptr]),
    "ss_head_isa_supported": (_int, [_int]),
    # type, isa, packed, rows, cols, hidden states, n, logits out, scratch, threads, stop flag
    "ss_head_logits": (_int, [_int, _int, _ptr, _i64, _i64, _ptr, _i64, _ptr, _ptr, _int, _ptr]),
    "ss_capture_size": (_size, []),
}


class NoNativeHead(Exception):
    """structspec's head does not apply to a model; the message says why, in one line."""


def type_name(qtype: int) -> str:
    """ggml's name of tensor type ``qtype`` (``Q6_K``), ``ggml type N`` for one it does not list."""
    return GGML_TYPES.get(qtype, f"ggml type {qtype}")


def _kernel() -> Any | None:
    """The compiled ``_head`` library through ctypes, or ``None`` when it is not built."""
    global _lib
    if _lib is None:
        try:
            from structspec.model import _head  # type: ignore[attr-defined]

            lib = ctypes.CDLL(_head.__file__)
        except (ImportError, OSError):
            _lib = False
            return None
        try:
            for name, (result, args) in _SIGNATURES.items():
                function = getattr(lib, name)
                function.restype, function.argtypes = result, args
        except AttributeError as exc:  # a build of another version of _head.c
            log.warning("structspec's head kernel is stale (%s): rebuild it", exc)
            _lib = False
            return None
        _lib = lib
    return _lib or None


def isa_supported(isa: str) -> bool:
    """Whether the kernel is built and this CPU runs its ``isa`` path (a name of ``ISAS``)."""
    lib = _kernel()
    return bool(lib is not None and isa in ISAS and lib.ss_head_isa_supported(ISAS[isa]))


def _forced_isa() -> str:
    """The instruction set ``STRUCTSPEC_HEAD_ISA`` names, lower case (``""``: none, or ``auto``)."""
    forced = os.environ.get("STRUCTSPEC_HEAD_ISA", "").strip().lower()
    return "" if forced == "auto" else forced


def isa_choice() -> tuple[str | None, str]:
    """The instruction set the kernel runs with here and, where it has none, why.

    The best this CPU has, or the one ``STRUCTSPEC_HEAD_ISA`` names. ``(None,
    why)``: the kernel is not built, this CPU has none of its instruction
    sets, or the environment names one this CPU lacks or the kernel does not
    know.
    """
    if _kernel() is None:
        return None, "structspec's head kernel is not built (server/structspec/model/_head.c)"
    forced = _forced_isa()
    if not forced:
        best = next((isa for isa in ISAS if isa_supported(isa)), None)
        if best is None:
            return None, f"this CPU has none of the kernel's instruction sets ({', '.join(ISAS)})"
        return best, ""
    if forced not in ISAS:
        return None, f"STRUCTSPEC_HEAD_ISA={forced} is none of {', '.join(ISAS)}"
    if not isa_supported(forced):
        return None, f"STRUCTSPEC_HEAD_ISA={forced}: this CPU (or this build) lacks it"
    return forced, ""


def chosen_isa() -> str | None:
    """The instruction set the kernel runs with here, ``None`` where it has none.

    See ``isa_choice``; a name in ``STRUCTSPEC_HEAD_ISA`` that gives none is
    logged: llama.cpp computes the head.
    """
    isa, why = isa_choice()
    if isa is None and _forced_isa():
        log.warning("%s: llama.cpp computes the output head", why)
    return isa


def kernel_available() -> bool:
    """Whether the kernel is built and has an instruction set for this CPU (see ``chosen_isa``)."""
    return chosen_isa() is not None


def enabled_by_environment() -> bool:
    return os.environ.get("STRUCTSPEC_NATIVE_HEAD", "1").strip().lower() not in {"0", "off", "no"}


class NativeHead:
    """An output matrix (Q8_0 or Q6_K) repacked for ``_head.c``, and the kernel that applies it."""

    def __init__(self, packed: np.ndarray, qtype: int, rows: int, cols: int, isa: str) -> None:
        self._packed = packed
        self.qtype = qtype
        self.rows = rows
        self.cols = cols
        #: The instruction set the kernel runs with (a name of ``ISAS``).
        self.isa = isa
        lib = _kernel()
        if lib is None:
            raise RuntimeError("structspec's head kernel is not built")
        self._lib: Any = lib
        self._scratch = np.empty(0, dtype=np.uint8)
        self._out = np.empty((0, rows), dtype=np.float32)

    @classmethod
    def from_blocks(
        cls, blocks: np.ndarray, qtype: int, rows: int, cols: int, isa: str | None = None
    ) -> NativeHead:
        """Repack ``rows x cols`` weights given as ggml's bytes of type ``qtype`` (Q8_0, Q6_K).

        ``isa``: the instruction set to run with, ``chosen_isa()`` by default.
        """
        lib = _kernel()
        isa = isa or chosen_isa()
        if lib is None or isa is None or not isa_supported(isa):
            raise RuntimeError(f"structspec's head kernel has no {isa or 'path'} for this CPU")
        name = type_name(qtype)
        size = lib.ss_head_packed_bytes(qtype, rows, cols)
        data = np.ascontiguousarray(blocks, dtype=np.uint8)
        if not size or data.nbytes != _matrix_bytes(qtype, rows, cols):
            raise ValueError(f"not a {rows} x {cols} {name} matrix ({data.nbytes} bytes)")
        packed = np.empty(size, dtype=np.uint8)
        if lib.ss_head_pack(qtype, data.ctypes.data, rows, cols, packed.ctypes.data) != 0:
            raise ValueError("the kernel refused the matrix")
        return cls(packed, qtype, rows, cols, isa)

    @classmethod
    def open(cls, path: Path, n_vocab: int, n_embd: int) -> NativeHead:
        """The head of the GGUF at ``path``; ``NoNativeHead`` (why) where the kernel does not apply.

        The output matrix is ``output.weight``, or the token embedding where the
        model ties them (Gemma). It does not apply with another storage type
        than Q8_0 or Q6_K, a shape other than ``n_vocab x n_embd``, logit
        soft-capping (the kernel returns raw logits), or no kernel for this CPU.
        """
        isa = chosen_isa()
        if isa is None:
            raise NoNativeHead(isa_choice()[1])
        try:
            layout = read_header(path)
        except (OSError, ValueError) as exc:
            raise NoNativeHead(f"the GGUF's header could not be read: {exc}") from None
        arch = layout.strings.get("general.architecture", "")
        for key in (f"{arch}.final_logit_softcapping", f"{arch}.logit_scale"):
            if layout.numbers.get(key, 0.0) not in (0.0, 1.0):
                raise NoNativeHead(f"the model sets {key} (the kernel returns raw logits)")
        tensor = head_tensor(layout)
        if tensor is None or tensor.shape != (n_embd, n_vocab):
            raise NoNativeHead(f"the GGUF has no {n_vocab} x {n_embd} output matrix")
        if tensor.type not in KERNEL_TYPES:
            covered = ", ".join(type_name(t) for t in KERNEL_TYPES)
            raise NoNativeHead(
                f"the kernel does not cover the head type {type_name(tensor.type)} "
                f"(it takes {covered})"
            )
        size = _matrix_bytes(tensor.type, n_vocab, n_embd)
        start = layout.data_start + tensor.offset
        if not size:
            raise NoNativeHead(f"{n_embd} columns are not whole {type_name(tensor.type)} blocks")
        if start + size > path.stat().st_size:
            raise NoNativeHead("the GGUF ends inside its output matrix")
        # read through a map: the pages are the ones llama.cpp maps for the same file
        blocks = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(size,))
        try:
            return cls.from_blocks(blocks, tensor.type, n_vocab, n_embd, isa)
        except (ValueError, RuntimeError) as exc:
            raise NoNativeHead(f"the kernel refused the matrix: {exc}") from None

    @property
    def min_rows(self) -> int:
        """The fewest rows of a pass this head computes (``MIN_ROWS``)."""
        return MIN_ROWS[self.qtype]

    def covers(self) -> str:
        """Why this head is used, in one line (``LlamaModel.head_reason``)."""
        return f"the kernel covers {type_name(self.qtype)} ({self.isa})"

    def logits(
        self, hidden: np.ndarray, threads: int, stop: int | None = None
    ) -> np.ndarray | None:
        """``hidden`` (``n x cols`` float32) times the matrix: ``n x rows`` logits.

        The array returned is this head's buffer, overwritten by the next call.
        ``stop`` is the address of a flag byte (``Interrupt.address``) another
        thread may set: the kernel then stops within a group of 16 vocabulary
        rows and ``None`` is returned.
        """
        n = len(hidden)
        x = np.ascontiguousarray(hidden, dtype=np.float32)
        if x.shape != (n, self.cols):
            raise ValueError(f"hidden states of shape {x.shape}, expected (n, {self.cols})")
        if len(self._out) < n:
            self._out = np.empty((n, self.rows), dtype=np.float32)
            scratch = self._lib.ss_head_scratch_bytes(self.qtype, n, self.cols)
            self._scratch = np.empty(scratch, dtype=np.uint8)
        out = self._out[:n]
        rc = self._lib.ss_head_logits(
            self.qtype,
            ISAS[self.isa],
            self._packed.ctypes.data,
            self.rows,
            self.cols,
            x.ctypes.data,
            n,
            out.ctypes.data,
            self._scratch.ctypes.data,
            max(1, threads),
            stop,
        )
        if rc == 1:
            return None
        if rc != 0:
            raise RuntimeError("structspec's head kernel failed")
        return out


def head_tensor(layout: GGUFHeader) -> TensorInfo | None:
    """The output matrix of a GGUF: ``output.weight``, else the tied token embedding."""
    return layout.tensors.get("output.weight") or layout.tensors.get("token_embd.weight")


def head_type(path: str | os.PathLike[str]) -> str:
    """ggml's name of the type of the GGUF's output matrix (``Q6_K``); ``""`` if unreadable."""
    try:
        tensor = head_tensor(read_header(path))
    except (OSError, ValueError):
        return ""
    return "" if tensor is None else type_name(tensor.type)


def _matrix_bytes(qtype: int, rows: int, cols: int) -> int:
    """ggml's bytes of a ``rows x cols`` matrix of ``qtype``; 0 for a type or shape not taken."""
    if qtype not in KERNEL_TYPES or cols % BLOCKS[qtype][0]:
        return 0
    values, size = BLOCKS[qtype]
    return rows * (cols // values) * size


class _Capture(ctypes.Structure):
    """``ss_capture`` of ``_head.c``: the eval callback's state (its size checked at load)."""

    _fields_ = [
        ("get_name", ctypes.c_void_p),
        ("nbytes", ctypes.c_void_p),
        ("tensor_get", ctypes.c_void_p),
        ("active", ctypes.c_int32),
        ("done", ctypes.c_int32),
        ("dst", ctypes.c_void_p),
        ("capacity", ctypes.c_size_t),
    ]


def _ggml_base() -> ctypes.CDLL | None:
    """llama-cpp-python's ggml base library (ggml's tensor accessors), already loaded by it."""
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        candidate = lib_dir / name
        if candidate.exists():
            try:
                return ctypes.CDLL(str(candidate))
            except OSError:
                return None
    return None


class HiddenStates:
    """The eval callback that hands ``result_norm`` over and skips llama.cpp's head.

    ``callback`` and ``user_data`` go into ``llama_context_params`` (``cb_eval``,
    ``cb_eval_user_data``) before the context is created. Around one decode:
    ``arm(n, n_embd)``, decode, then ``take()`` (also after a failed decode)
    returns the ``n x n_embd`` hidden states, or ``None`` when the callback
    did not capture them: llama.cpp then ran its head as usual.
    """

    def __init__(self, callback: Any, capture: _Capture) -> None:
        self.callback = callback
        self._capture = capture
        self.user_data = ctypes.cast(ctypes.pointer(capture), ctypes.c_void_p)
        self._buffer = np.empty(0, dtype=np.float32)
        self._shape = (0, 0)

    @classmethod
    def create(cls) -> HiddenStates | None:
        """``None`` where the kernel library or ggml's accessors are not there."""
        import llama_cpp

        lib = _kernel()
        ggml = _ggml_base()
        if lib is None or ggml is None:
            return None
        try:
            accessors = [
                ctypes.cast(getattr(ggml, name), ctypes.c_void_p).value
                for name in ("ggml_get_name", "ggml_nbytes", "ggml_backend_tensor_get")
            ]
            address = ctypes.cast(lib.ss_capture_eval, ctypes.c_void_p).value
        except AttributeError:
            return None
        if address is None or None in accessors:
            return None
        if lib.ss_capture_size() != ctypes.sizeof(_Capture):
            log.warning(
                "structspec's head kernel was built with another ss_capture "
                "(%d bytes, here %d): llama.cpp computes the output head",
                lib.ss_capture_size(),
                ctypes.sizeof(_Capture),
            )
            return None
        capture = _Capture(*accessors, 0, 0, None, 0)
        return cls(llama_cpp.ggml_backend_sched_eval_callback(address), capture)

    def arm(self, n: int, n_embd: int) -> None:
        """Capture the next decode's hidden states: ``n`` rows of ``n_embd``."""
        if self._buffer.size < n * n_embd:
            self._buffer = np.empty(n * n_embd, dtype=np.float32)
        c = self._capture
        c.dst = self._buffer.ctypes.data
        c.capacity = n * n_embd * self._buffer.itemsize
        c.done = 0
        c.active = 1
        self._shape = (n, n_embd)

    def take(self) -> np.ndarray | None:
        """The armed decode's hidden states (a view, valid until the next ``arm``), and disarm.

        ``None``: not captured (the decode failed, or ``result_norm`` was not
        the expected ``n x n_embd``): llama.cpp then ran its own head.
        """
        c = self._capture
        c.active = 0
        if not c.done:
            return None
        n, n_embd = self._shape
        return self._buffer[: n * n_embd].reshape(n, n_embd)
