"""``LlamaModel``: the ``Model`` protocol over llama-cpp-python's low-level API.

Why the low-level API: the high-level ``Llama`` keeps logits for every
position once a draft model is set (an ``n_ctx x n_vocab`` float buffer, 2 GiB
for Gemma's 262k vocabulary) and offers no way to ask for logits on only the
rows being verified. Here a batch asks for logits exactly where needed:
nowhere during prefill, on every row during verification.

Safety: ``llama_decode`` aborts the whole process (``GGML_ASSERT``) when a
batch exceeds ``n_batch`` or the context; every decode here is chunked by
``n_batch`` and checked against the context first, so no input reaches an
assert.

Slots: the context holds ``slots`` independent KV sequences. ``prefill``
continues in the slot whose cached tokens share the longest prefix with the new
prompt (else the least recently used), so alternating between two documents
re-evaluates neither. A prompt that would cut ``FORK_MIN`` or more prompt
tokens off that slot (a cursor in a document whose text from its start a slot
holds past the cursor) continues in a copy of it instead (``_fork``): the slot
keeps its tail for the next cursor there, and copying a sequence costs a
memory copy of its KV buffer where evaluating the tail again costs seconds.

Widened weights: ``load(..., widen=True)`` loads a copy of the file whose
Q5_0 matrices are stored as Q8_0, the same weights evaluated faster
(``model/widen.py``); ``path`` stays the user's file (names, caches' keys) and
``weights`` is the file llama.cpp loaded.

AMX: where llama.cpp would multiply with Intel AMX, whose matrix multiply
crashes, the weights are loaded as plain CPU tensors (``model/amx.py``). The
file is checked before llama.cpp sees it (``model/paths.py``).

Output head: a verification pass's logits are computed by structspec's own
kernel (``model/head.py``) where it applies: llama.cpp hands over the final
hidden states through its eval callback and skips its own head, whose Q8_0
matrix multiply costs as much per drafted row as a whole one-token pass.
``head`` names the code in use: ``"structspec"`` or ``"llama.cpp"``;
``head_reason`` says why, in one line (the kernel covers the type, or what
kept llama.cpp's: the kernel not built, no instruction set for this CPU, a
type it does not cover, soft-capping, the load-time check failed), and
``head_type`` is the output matrix's GGUF type (``Q6_K``).

Interruption: inside ``interrupted_by(stop)`` llama.cpp's abort callback reads
``stop``'s flag after every node of the graph, and structspec's head kernel
after every 16 vocabulary rows, so a decode stops within a millisecond of
``stop.set()`` from another thread; the batch's positions then leave the KV
cache, and ``Interrupted`` is raised with the slot as it was before that
decode.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from structspec.files import file_stamp
from structspec.model.amx import without_amx_buffers
from structspec.model.base import (
    FimTokens,
    Interrupt,
    Interrupted,
    ModelError,
    Rows,
    TokenCheck,
    common_prefix_len,
)
from structspec.model.gguf_file import GGUFError, read_header
from structspec.model.head import (
    HiddenStates,
    NativeHead,
    NoNativeHead,
    enabled_by_environment,
    head_type,
)
from structspec.model.paths import check_gguf_file
from structspec.model.prefix_cache import RESTORE_MIN, PrefixCache
from structspec.model.threads import CallingThread, IdleMeter, ThreadGovernor
from structspec.model.widen import forget, widened_weights

#: Prompt tokens of a slot past where a new prompt leaves it that are kept by
#: continuing in a copy of the slot (``LlamaModel._fork``): on 2 cores the
#: default model evaluates them in about 1.3 s, a 1.5B model in 10-16 s, and a
#: copy of a 4,096-token sequence takes milliseconds (``docs/MEASUREMENTS.md``
#: §12). More than a FIM prompt leaves behind at a new line and never uses
#: again: its suffix and middle tokens (at most 259,
#: ``completion.prompt.FIM_SUFFIX_TOKENS``) and the line before the cursor.
FORK_MIN = 512

_llama_backend_ready = False
_log_callback: object = None  # keeps the ctypes callback alive
_flag_reader_fn: object = None  # see _flag_reader
_NEVER = Interrupt()  # the flag read outside interrupted_by: never set


def _silence_llama_logs() -> None:
    """Route llama.cpp's logging to nowhere unless STRUCTSPEC_LLAMA_LOG is set."""
    global _log_callback
    import llama_cpp

    if os.environ.get("STRUCTSPEC_LLAMA_LOG") or _log_callback is not None:
        return

    @llama_cpp.llama_log_callback
    def _drop(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    _log_callback = _drop
    llama_cpp.llama_log_set(_drop, ctypes.c_void_p(0))


def _flag_reader() -> object | None:
    """A native ``bool f(void *flag)`` true when the byte at ``flag`` is set; ``None``: none here.

    llama.cpp calls its abort callback after every node of a graph, hundreds of
    times per decode, on the decoding thread: a Python callback would take the
    GIL each time. libc's ``strlen`` over an ``Interrupt`` (a flag byte, then a
    NUL) returns 1 or 0, the flag's truth value, in the register a ``bool`` is
    returned in (its low byte, on x86-64 and AArch64), and needs no Python.
    """
    global _flag_reader_fn
    if _flag_reader_fn is None:
        import llama_cpp

        name = ctypes.util.find_library("c") or ("msvcrt" if os.name == "nt" else None)
        try:
            libc = ctypes.CDLL(name)
            address = ctypes.cast(libc.strlen, ctypes.c_void_p).value
        except (OSError, AttributeError):
            address = None
        _flag_reader_fn = llama_cpp.ggml_abort_callback(address) if address else False
    return _flag_reader_fn or None


def _init_backend() -> None:
    global _llama_backend_ready
    if not _llama_backend_ready:
        import llama_cpp

        _silence_llama_logs()
        llama_cpp.llama_backend_init()
        _llama_backend_ready = True


def _native_head(path: Path, model_ptr: object) -> tuple[NativeHead | None, str]:
    """structspec's output head for the loaded model (``None`` where it does not apply), and why."""
    if not enabled_by_environment():
        return None, "turned off (STRUCTSPEC_NATIVE_HEAD=0)"
    import llama_cpp

    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model_ptr))
    n_embd = llama_cpp.llama_model_n_embd(model_ptr)
    try:
        head = NativeHead.open(path, n_vocab, n_embd)
    except NoNativeHead as exc:
        return None, str(exc)
    except (OSError, ValueError, RuntimeError) as exc:  # the file changed under us
        return None, f"the output matrix could not be read: {exc}"
    return head, head.covers()


def _why_unloadable(path: Path) -> str:
    """What structspec's own header reader says of a file llama.cpp refused: that it ends
    early (a download not finished) or is damaged where, else only that it is refused."""
    try:
        header = read_header(path)
        size = path.stat().st_size
    except (GGUFError, OSError) as exc:
        return str(exc).removesuffix(f": {path}")
    ends = [t.offset + (t.nbytes() or 1) for t in header.tensors.values()]
    if ends and header.data_start + max(ends) > size:
        return "the file ends before its tensors do: a download not finished?"
    return "corrupt or unsupported"


def _stamp(path: Path) -> list[object] | None:
    """Which file is at ``path`` now (``files.file_stamp``); ``None`` when none is."""
    try:
        return file_stamp(path)
    except OSError:
        return None


class _Slot:
    __slots__ = ("filled", "seq", "tokens", "used")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.tokens: list[int] = []
        #: How many of ``tokens`` are a prompt's (prefilled or read back), not
        #: a generation's: only those are worth a copy of the slot (``_fork``).
        self.filled = 0
        self.used = 0.0

    def fill(self, tokens: Sequence[int]) -> None:
        """Append a prompt's ``tokens``, prefilled or read back (KV cells: the caller's)."""
        self.tokens.extend(tokens)
        self.filled = len(self.tokens)

    def cut(self, n: int) -> None:
        """Forget the tokens from ``n`` on (the KV cache's side is the caller's)."""
        del self.tokens[n:]
        self.filled = min(self.filled, len(self.tokens))


class _PassRows(Sequence[Any]):
    """Per-row values of one verification pass, read from llama.cpp's logits buffer in place.

    Valid until the next decode: a later read raises instead of returning
    another pass's numbers.
    """

    what = "rows"

    def __init__(self, model: LlamaModel, logits: np.ndarray) -> None:
        self._model = model
        self._decode_id = model._decode_id
        self._logits = logits

    def __len__(self) -> int:
        return len(self._logits)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._model._decode_id != self._decode_id:
            raise RuntimeError(f"{self.what} of a verification pass read after the next decode")
        return self._row(i)

    def _row(self, i: int) -> Any:
        raise NotImplementedError


class _Margins(_PassRows):
    """Top-1 minus top-2 logit per row, computed only for the rows asked for."""

    what = "margins"

    def __init__(self, model: LlamaModel, logits: np.ndarray, argmax: np.ndarray) -> None:
        super().__init__(model, logits)
        self._argmax = argmax

    def _row(self, i: int) -> float:
        row = self._logits[i]
        best = int(self._argmax[i])
        top = row[best]
        row[best] = -np.inf  # the buffer is ours until the next decode
        second = row.max()
        row[best] = top
        return float(top - second)


class _Logits(_PassRows):
    """Each row's logits as a read-only view (no copy of ``n x n_vocab`` floats)."""

    what = "logits"

    def _row(self, i: int) -> np.ndarray:
        row = self._logits[i].view()
        row.flags.writeable = False
        return row


class LlamaModel:
    """A GGUF model in one llama.cpp context. See the module docstring."""

    def __init__(
        self,
        path: Path,
        model_ptr: object,
        ctx_ptr: object,
        *,
        n_ctx: int,
        n_batch: int,
        threads: int,
        slots: int,
        hidden: HiddenStates | None = None,
        weights: Path | None = None,
    ) -> None:
        import llama_cpp

        self._llama = llama_cpp
        self.path = path
        self.name = path.name
        #: The file llama.cpp loaded: ``path``, or its widened copy (``model/widen.py``).
        self.weights = path if weights is None else weights
        self._model = model_ptr
        self._ctx = ctx_ptr
        self._vocab = llama_cpp.llama_model_get_vocab(model_ptr)
        self._mem = llama_cpp.llama_get_memory(ctx_ptr)
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.threads = threads
        #: Threads of the next decode: fewer while other processes hold the cores.
        self.governor = ThreadGovernor(threads, IdleMeter(cores=os.cpu_count() or 1).idle_cores)
        self._threads_now = threads
        self._pinned = 0  # threads every decode uses while pinned (0: the governor decides)
        self._caller = CallingThread()  # one thread for llama.cpp's calls (model/threads.py)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._slots = [_Slot(i) for i in range(slots)]
        n_swa = int(llama_cpp.llama_model_n_swa(model_ptr))
        #: Positions the sliding-window attention layers see (Gemma 3: 512), where
        #: a slot can hold more: a saved state then holds those layers' cells of
        #: its last ``sliding_window`` positions only (0: no such layers).
        self.sliding_window = n_swa if 0 < n_swa < n_ctx else 0
        self._slot = self._slots[0]
        #: A slot copy that llama.cpp makes at the next decode (``_fork``):
        #: until then no sequence state is read or written.
        self._copy_pending = False
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._closed = False
        self._decode_id = 0  # counts decodes, so stale logits views can tell
        self._interrupt: Interrupt | None = None  # set inside interrupted_by
        self.n_embd = llama_cpp.llama_model_n_embd(model_ptr)
        self._hidden = hidden  # the eval callback's state, kept alive with the context
        self._head: NativeHead | None = None
        #: The fewest rows of a pass the kernel computes, when not ``head.min_rows``
        #: (``kernel_every_pass``).
        self._kernel_rows: int | None = None
        #: The code that computes a verification pass's output head.
        self.head = "llama.cpp"
        #: Why that code computes it, in one line (set at load: ``load``, ``_attach_head``).
        self.head_reason = "structspec's head was not tried"
        #: Evaluated prefixes on disk (``runtime.open_model`` attaches it), or ``None``.
        self.prefix_cache: PrefixCache | None = None

    # -- loading -----------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        n_ctx: int = 4096,
        threads: int = 2,
        slots: int = 1,
        n_batch: int = 512,
        widen: bool = False,
        announce: Callable[[str], None] | None = None,
    ) -> LlamaModel:
        """Load a GGUF. ``n_ctx`` is per slot. Raises ``ModelError`` with one line.

        ``widen``: load the file's widened copy (``model/widen.py``), written on
        first use (``announce`` says so); a copy llama.cpp cannot load is
        forgotten (``widen.forget``) and the file loaded as it is.
        """
        p = check_gguf_file(path)
        try:
            import llama_cpp
        except ImportError as exc:
            raise ModelError(f"llama-cpp-python is not installed: {exc}") from None
        _init_backend()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        without_amx_buffers(mparams)  # AMX's matrix multiply crashes (module docstring)
        weights = widened_weights(p, announce=announce) if widen else p
        tried = _stamp(weights)
        model = llama_cpp.llama_model_load_from_file(str(weights).encode(), mparams)
        if not model and weights != p:
            # Refused: forgotten only if it is still the file llama.cpp read, not one that
            # another process's pruning removed (and perhaps wrote again) meanwhile.
            if tried is not None and _stamp(weights) == tried:
                forget(weights)
            weights = p
            model = llama_cpp.llama_model_load_from_file(str(p).encode(), mparams)
        if not model:
            raise ModelError(f"llama.cpp could not load the model file {p} ({_why_unloadable(p)})")
        n_train = llama_cpp.llama_model_n_ctx_train(model)
        if n_train > 0:
            n_ctx = min(n_ctx, n_train)
        n_batch = max(16, min(n_batch, n_ctx))
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx * slots
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = slots
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = False  # one stream per slot: attention never scans other slots
        cparams.swa_full = True  # keep sliding-window KV whole so any position can be rolled back
        cparams.no_perf = True
        # the eval callback only where structspec's head applies: it is asked
        # about every node of every decode
        head, reason = _native_head(weights, model)
        hidden = HiddenStates.create() if head is not None else None
        if head is not None and hidden is None:
            reason = "llama.cpp's eval callback cannot hand the hidden states to the kernel"
        if hidden is not None:
            cparams.cb_eval = hidden.callback
            cparams.cb_eval_user_data = hidden.user_data
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            llama_cpp.llama_model_free(model)
            raise ModelError(f"llama.cpp could not create a context for {p} (out of memory?)")
        loaded = cls(
            p,
            model,
            ctx,
            n_ctx=n_ctx,
            n_batch=n_batch,
            threads=threads,
            slots=slots,
            hidden=hidden,
            weights=weights,
        )
        loaded.head_reason = reason
        if head is not None and hidden is not None:
            loaded._attach_head(head)
        return loaded

    def _attach_head(self, head: NativeHead) -> None:
        """Use structspec's output head (``model/head.py``) if it agrees with llama.cpp's.

        The check: a few rows verified by llama.cpp's head and again by the
        kernel, at the same positions in the same batch shape, must give the
        same logits up to the order of float additions. Any disagreement (a
        model whose graph does more after ``result_norm``) keeps llama.cpp's.
        """
        self._head = head
        probe = self.tokenize("def add(a, b):\n    return a + b\n")[:12]
        self.prefill(probe[:4])
        with self.llama_cpp_head():
            expected = np.array(self.verify(probe[4:]).logits[:])
        self.truncate(4)
        try:
            got = np.array(self.verify(probe[4:]).logits[:])
        except RuntimeError:  # the kernel refused (it checks the CPU again)
            got = None
        self.truncate(0)
        scale = max(1.0, float(np.abs(expected).max()))
        if got is None or got.shape != expected.shape:
            self._head = None
            self.head_reason = "the load-time check failed: the kernel gave no logits"
            return
        worst = float(np.abs(got - expected).max())
        if worst > 1e-3 * scale:
            self._head = None
            self.head_reason = (
                f"the load-time check failed: its logits differ from llama.cpp's by {worst:.3g}"
            )
            return
        self.head = "structspec"
        self.head_reason = head.covers()

    @functools.cached_property
    def head_type(self) -> str:
        """The GGUF type of the output matrix (``Q6_K``), ``""`` where it cannot be read.

        Read on first use (for the reports): reading a GGUF's header takes
        0.5-0.8 s on a large vocabulary, too much to add to every load.
        """
        return head_type(self.weights)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._llama.llama_batch_free(self._batch)
        self._llama.llama_free(self._ctx)
        self._llama.llama_model_free(self._model)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- metadata ----------------------------------------------------------
    def metadata(self, key: str) -> str | None:
        """A GGUF metadata value as a string (``general.architecture`` ...)."""
        buf = ctypes.create_string_buffer(4096)
        n = self._llama.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def chat_template(self) -> str | None:
        """The chat template stored in the GGUF, if any."""
        ptr = self._llama.llama_model_chat_template(self._model, None)
        return ptr.decode("utf-8", "replace") if ptr else None

    # -- tokenizer ---------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> list[int]:
        """``special``: parse control-token text (``<start_of_turn>``), for chat templates."""
        data = text.encode("utf-8", "replace")
        n_max = len(data) + 8
        buf = (self._llama.llama_token * n_max)()
        n = self._llama.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_bos, special)
        if n < 0:
            n_max = -n
            buf = (self._llama.llama_token * n_max)()
            n = self._llama.llama_tokenize(
                self._vocab, data, len(data), buf, n_max, add_bos, special
            )
        return list(buf[: max(n, 0)])

    def token_bytes(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            if not 0 <= token < self.n_vocab:
                return b""
            buf = ctypes.create_string_buffer(64)
            n = self._llama.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self._llama.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            piece = buf.raw[: max(n, 0)]
            self._pieces[token] = piece
        return piece

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = bool(self._llama.llama_vocab_is_eog(self._vocab, token))
            self._eog[token] = eog
        return eog

    def bos_token(self) -> int | None:
        if not self._llama.llama_vocab_get_add_bos(self._vocab):
            return None
        bos = self._llama.llama_vocab_bos(self._vocab)
        return bos if bos >= 0 else None

    def fim_tokens(self) -> FimTokens | None:
        v = self._vocab
        pre = self._llama.llama_vocab_fim_pre(v)
        suf = self._llama.llama_vocab_fim_suf(v)
        mid = self._llama.llama_vocab_fim_mid(v)
        if min(pre, suf, mid) < 0:
            return None
        return FimTokens(pre, suf, mid)

    # -- threads -----------------------------------------------------------
    @property
    def decode_threads(self) -> int:
        """Threads of the next decode: fewer while other processes hold the cores."""
        return self._pinned or self.governor.threads

    @contextlib.contextmanager
    def threads_pinned(self, threads: int) -> Iterator[None]:
        """Every decode inside runs on ``threads`` threads, whatever the governor says."""
        before, self._pinned = self._pinned, max(1, threads)
        try:
            yield
        finally:
            self._pinned = before

    @contextlib.contextmanager
    def llama_cpp_head(self) -> Iterator[None]:
        """Verification passes inside compute their logits with llama.cpp's head (a baseline)."""
        before, self._head = self._head, None
        try:
            yield
        finally:
            self._head = before

    @contextlib.contextmanager
    def kernel_every_pass(self) -> Iterator[None]:
        """Passes inside compute their logits with structspec's head, if in use, at any row count.

        The kernel's own cost where llama.cpp's head is the one used (``head.MIN_ROWS``),
        for the reports.
        """
        before, self._kernel_rows = self._kernel_rows, 1
        try:
            yield
        finally:
            self._kernel_rows = before

    @contextlib.contextmanager
    def interrupted_by(self, stop: Interrupt) -> Iterator[None]:
        """Decodes inside stop part-way once ``stop`` is set, raising ``Interrupted``."""
        reader = _flag_reader()
        if reader is None:  # no native flag reader: decodes run to their end
            yield
            return
        self._llama.llama_set_abort_callback(self._ctx, reader, ctypes.c_void_p(stop.address))
        self._interrupt = stop
        try:
            yield
        finally:
            self._interrupt = None
            self._llama.llama_set_abort_callback(self._ctx, reader, ctypes.c_void_p(_NEVER.address))

    # -- KV cache ----------------------------------------------------------
    @property
    def cached_tokens(self) -> Sequence[int]:
        return self._slot.tokens

    def _decode(self, tokens: Sequence[int], start: int, logits: bool) -> None:
        """Decode ``tokens`` at positions ``start..`` in the current slot, one ``n_batch`` chunk."""
        n = len(tokens)
        assert 0 < n <= self.n_batch
        if start + n > self.n_ctx:
            raise ModelError(f"decode past the context ({start + n} > {self.n_ctx} tokens)")
        b = self._batch
        seq = self._slot.seq
        for i, tok in enumerate(tokens):
            if not 0 <= tok < self.n_vocab:
                raise ModelError(f"token id {tok} is outside the vocabulary")
            b.token[i] = tok
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        b.n_tokens = n
        self._decode_id += 1
        threads = self._pinned or self.governor.next_threads()
        if threads != self._threads_now:
            self._llama.llama_set_n_threads(self._ctx, threads, threads)
            self._threads_now = threads
        if threads > 1 and self._caller.moved():
            print(
                "structspec: warning: llama.cpp decodes from a second thread; its OpenMP "
                "threads then wait in the kernel at every barrier and passes are slower "
                "(load and decode the model on one thread: model/threads.py)",
                file=sys.stderr,
            )
        wall, cpu = time.perf_counter(), time.process_time()
        rc = self._llama.llama_decode(self._ctx, b)
        self._copy_pending = False  # a decode first makes the copies queued before it
        if not self._pinned:
            self.governor.observe(threads, time.perf_counter() - wall, time.process_time() - cpu)
        if rc != 0:
            self._drop_from(start)  # leave the slot consistent
            if rc == 2 and self._interrupt is not None and self._interrupt.is_set():
                raise Interrupted("the decode was interrupted")
            raise ModelError(f"llama_decode failed with status {rc}")

    def _drop_from(self, start: int) -> None:
        """Drop whatever a batch at ``start`` may have added to the current slot."""
        self._llama.llama_memory_seq_rm(self._mem, self._slot.seq, start, -1)
        self._slot.cut(start)

    def _select_slot(self, tokens: Sequence[int]) -> int:
        best, best_len = self._slot, common_prefix_len(self._slot.tokens, tokens)
        for slot in self._slots:
            n = common_prefix_len(slot.tokens, tokens)
            if n > best_len:
                best, best_len = slot, n
        if len(self._slots) > 1 and best_len * 2 < min(len(best.tokens), len(tokens)):
            # Continuing here would overwrite most of what this slot holds (another
            # document's prompt that shares only BOS and a header): take the least
            # recently used slot instead, so alternating documents keep their caches.
            # A prompt that is mostly a prefix of the slot (a cursor above a
            # pre-warmed window) is the same document: it continues here.
            best = min(self._slots, key=lambda s: s.used)
            best_len = common_prefix_len(best.tokens, tokens)
        elif best.filled - best_len >= FORK_MIN and len(self._slots) > 1:
            best = self._fork(best, best_len)
        self._slot = best
        best.used = time.monotonic()
        return best_len

    def _fork(self, source: _Slot, n: int) -> _Slot:
        """A copy of ``source``'s first ``n`` tokens in the least recently used other slot.

        llama.cpp copies a sequence into another stream whole, at the start of
        the next decode (``llama_memory_seq_cp``); the copy's tail past ``n``
        is then dropped from its cells. Where the cache cannot drop a part of
        a sequence (a recurrent model), ``source`` is returned, to be
        truncated as before.
        """
        target = min((s for s in self._slots if s is not source), key=lambda s: s.used)
        self._llama.llama_memory_seq_cp(self._mem, source.seq, target.seq, -1, -1)
        if not self._llama.llama_memory_seq_rm(self._mem, target.seq, n, -1):
            self._llama.llama_memory_seq_rm(self._mem, target.seq, -1, -1)
            target.cut(0)
            return source
        target.tokens[:] = source.tokens[:n]
        target.filled = min(source.filled, n)
        source.used = time.monotonic()  # not the next one evicted
        self._copy_pending = True
        return target

    def reusable_prefix(self, tokens: Sequence[int]) -> int:
        """Tokens of ``tokens`` the best slot already holds (what ``prefill`` would reuse)."""
        return max(common_prefix_len(slot.tokens, tokens) for slot in self._slots)

    def prefill(self, tokens: Sequence[int]) -> int:
        if len(tokens) + 1 > self.n_ctx:
            raise ModelError(f"{len(tokens)} tokens do not fit the context of {self.n_ctx}")
        return self._fill(tokens, self._select_slot(tokens))

    def prefill_part(self, tokens: Sequence[int], n: int) -> int:
        """``prefill(tokens[:n])`` in the slot ``prefill(tokens)`` would use (a chunk of it).

        A chunk alone could look like another document's start and take its slot.
        A saved state is read back for all of ``tokens``, not the chunk: after a
        restart the whole saved prompt comes back with the first chunk, and
        the slot then holds more of ``tokens`` than ``n`` (what it returns).
        """
        if len(tokens) + 1 > self.n_ctx:
            raise ModelError(f"{len(tokens)} tokens do not fit the context of {self.n_ctx}")
        return self._fill(tokens, self._select_slot(tokens), end=n)

    def _fill(self, tokens: Sequence[int], reused: int, end: int | None = None) -> int:
        """Evaluate ``tokens[:end]`` (all of them by default) after the ``reused`` the slot holds.

        With a prefix cache, a saved state of ``tokens`` that spares enough of
        their evaluation is read back first (it may hold more than ``end``).
        Returns what the slot held of ``tokens`` before evaluating: reused or
        read back. Nothing is saved here (a request may be waiting on this
        prefill): ``save_prefixes`` does that at idle time.
        """
        end = len(tokens) if end is None else end
        self.truncate(reused)
        cache = self.prefix_cache
        if self._copy_pending:  # a state read back now would be overwritten by the copy
            cache = None
        if cache is not None and len(tokens) - len(self._slot.tokens) >= RESTORE_MIN:
            self.truncate(cache.restore(self, tokens, len(self._slot.tokens)))
        held = len(self._slot.tokens)
        for start in range(held, end, self.n_batch):
            chunk = list(tokens[start : min(start + self.n_batch, end)])
            self._decode(chunk, start, logits=False)
            self._slot.fill(chunk)
        return held

    # -- the prefix cache's state ------------------------------------------
    def identity(self) -> str:
        """What a saved KV state must match: the model file, the context and llama.cpp."""
        return json.dumps(
            [
                *file_stamp(self.path),
                self.weights != self.path,  # widened: the same weights, other kernels
                self.n_ctx,
                self._llama.__version__,
            ]
        )

    def save_prefixes(self, *, closing: bool = False) -> int:
        """Save each KV slot's tokens and state that the prefix cache lacks; how many were saved.

        For idle time (``model.extras.save_prefixes``): what a slot holds now,
        its tokens and its sequence's state read together, so a state is never
        saved under tokens a later request changed. With a sliding window the
        cache takes no state of more than its ``window`` tokens
        (``PrefixCache.serves``): at ``closing`` (the model is released next) a
        slot holding more is cut back to its prompt's first ones, and saved.
        """
        cache = self.prefix_cache
        if cache is None:
            return 0
        saved = 0
        for slot in self._slots:
            if closing and not cache.serves(len(slot.tokens)):
                self._cut(slot, min(slot.filled, cache.window))
            saved += cache.save_held(slot.tokens, functools.partial(self._seq_state, slot.seq))
        return saved

    def state_bytes(self) -> bytes | None:
        """llama.cpp's state of the current slot's sequence (``prefix_cache.SavesState``)."""
        return self._seq_state(self._slot.seq)

    def _seq_state(self, seq: int) -> bytes | None:
        if self._copy_pending:  # a forked slot's cells are not copied yet (``_fork``)
            return None
        size = self._llama.llama_state_seq_get_size(self._ctx, seq)
        if size <= 0:
            return None
        buf = (ctypes.c_uint8 * size)()
        n = self._llama.llama_state_seq_get_data(self._ctx, buf, size, seq)
        return ctypes.string_at(buf, n) if n > 0 else None

    def load_state(self, tokens: Sequence[int], data: bytes) -> bool:
        """Replace the current slot's sequence by a saved one (``prefix_cache.SavesState``)."""
        if not tokens or len(tokens) + 1 > self.n_ctx:
            return False
        slot = self._slot
        self._llama.llama_memory_seq_rm(self._mem, slot.seq, -1, -1)
        slot.cut(0)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if self._llama.llama_state_seq_set_data(self._ctx, buf, len(data), slot.seq) == 0:
            self._llama.llama_memory_seq_rm(self._mem, slot.seq, -1, -1)
            return False
        slot.fill(tokens)
        return True

    def _rows(self, n: int) -> np.ndarray:
        ptr = self._llama.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n, self.n_vocab))

    def verify(self, tokens: Sequence[int]) -> Rows:
        n = len(tokens)
        if n == 0:
            return Rows([], [], [])
        if n > self.n_batch:
            raise ModelError(f"cannot verify {n} rows in one pass (n_batch {self.n_batch})")
        start = len(self._slot.tokens)
        logits = self._verify_logits(tokens, start)
        self._slot.tokens.extend(tokens)
        argmax = logits.argmax(axis=1)
        return Rows([int(a) for a in argmax], _Margins(self, logits, argmax), _Logits(self, logits))

    def _verify_logits(self, tokens: Sequence[int], start: int) -> np.ndarray:
        """Decode ``tokens`` at ``start`` with logits on every row; those logits.

        With structspec's head the decode stops at the hidden states and the
        kernel computes the logits; a pass of fewer rows than the kernel takes
        for the matrix's type (``head.MIN_ROWS``: one row of a Q6_K head) runs
        llama.cpp's head, the cheaper there. Should the callback not capture them,
        llama.cpp has run its own head and its logits are read instead. The
        kernel reads the ``interrupted_by`` flag too: interrupted there, the
        batch's rows leave the KV cache as they do when llama.cpp aborts.
        """
        head, hidden = self._head, self._hidden
        if head is None or hidden is None or len(tokens) < (self._kernel_rows or head.min_rows):
            self._decode(tokens, start, logits=True)
            return self._rows(len(tokens))
        hidden.arm(len(tokens), self.n_embd)
        try:
            self._decode(tokens, start, logits=True)
        finally:
            states = hidden.take()
        if states is None:
            return self._rows(len(tokens))
        stop = self._interrupt
        logits = head.logits(states, self._threads_now, stop.address if stop else None)
        if logits is None:
            self._drop_from(start)
            raise Interrupted("the decode was interrupted")
        return logits

    def truncate(self, n: int) -> None:
        self._cut(self._slot, n)

    def _cut(self, slot: _Slot, n: int) -> None:
        """Cut ``slot`` back to ``n`` tokens."""
        n = max(0, n)
        if n >= len(slot.tokens):
            return
        if not self._llama.llama_memory_seq_rm(self._mem, slot.seq, n, -1):
            # A partial removal the cache cannot do: drop the sequence entirely.
            self._llama.llama_memory_seq_rm(self._mem, slot.seq, -1, -1)
            n = 0
        slot.cut(n)

    def teacher_forced(self, prompt: Sequence[int], output: Sequence[int]) -> list[TokenCheck]:
        if not prompt or not output:
            return []
        self.prefill(prompt[:-1])
        feed = [prompt[-1], *output[:-1]]
        checks: list[TokenCheck] = []
        chunk_rows = min(self.n_batch, 64)
        for start in range(0, len(feed), chunk_rows):
            chunk = feed[start : start + chunk_rows]
            base = len(self._slot.tokens)
            self._decode(chunk, base, logits=True)
            self._slot.tokens.extend(chunk)
            logits = self._rows(len(chunk))
            for i, row in enumerate(logits):
                tok = int(output[start + i])
                best = int(row.argmax())
                checks.append(TokenCheck(tok, best, float(row[best] - row[tok])))
        return checks
