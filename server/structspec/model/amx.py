"""Loading weights without llama.cpp's AMX buffers, whose matrix multiply crashes.

On CPUs with Intel AMX (Sapphire Rapids and later) a native build of llama.cpp
repacks quantized weights into its AMX buffer, whose matrix multiply crashes
the process with a segmentation fault on the first decode (seen with the
default model; llama.cpp issue 20824, open). When the backend reports
``AMX_INT8 = 1`` (``amx_backend``) the weights are loaded without llama.cpp's
extra buffer types (``use_extra_bufts``), as plain CPU tensors:
``without_amx_buffers`` for ``LlamaModel``'s own model parameters,
``plain_buffers_for_llama`` around llama-cpp-python's high-level ``Llama``
(the benchmark's baselines; llama-server's equivalent is ``--no-repack``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def amx_backend() -> bool:
    """Whether this llama.cpp build multiplies with Intel AMX."""
    import llama_cpp

    try:
        info = llama_cpp.llama_print_system_info()
    except (AttributeError, OSError):
        return False
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    return "AMX_INT8 = 1" in text


def without_amx_buffers(params: Any) -> Any:
    """``params`` (``llama_model_params``) set to load plain CPU tensors where AMX would be used."""
    if amx_backend():
        params.use_extra_bufts = False
    return params


@contextlib.contextmanager
def plain_buffers_for_llama() -> Iterator[None]:
    """Inside it, llama-cpp-python's high-level ``Llama`` loads weights as plain CPU tensors
    where ``amx_backend()`` (it offers no argument for ``use_extra_bufts``)."""
    import llama_cpp.llama_cpp as low

    if not amx_backend():
        yield
        return
    default = low.llama_model_default_params
    low.llama_model_default_params = lambda: without_amx_buffers(default())
    try:
        yield
    finally:
        low.llama_model_default_params = default
