"""The OpenAI request and response shapes served by ``structspec serve``.

Requests are validated field by field: a field this server knows is checked
for its type and range and gets a 400 naming the field; a field it does not
know is ignored (clients send many optional ones). What is supported:

- ``/v1/completions``: ``prompt`` (a string, a one-string list, or a list of
  token ids), ``suffix`` (fill-in-the-middle, only on models with FIM tokens);
- ``/v1/chat/completions``: ``messages`` (``system``/``developer``/``user``/
  ``assistant``/``tool`` roles; content a string or a list of text parts);
- both: ``model``, ``max_tokens`` (chat also ``max_completion_tokens``),
  ``stop`` (a string or up to 15 strings of at most 1024 characters), ``stream``,
  ``stream_options.include_usage``, ``user``, ``n`` = 1.
- Sampling: ``temperature`` (0..2; 0 is greedy, and so is leaving it out,
  unlike OpenAI's default of 1: the same request gives the same answer),
  ``top_p`` (0..1), ``top_k`` (0 or -1: off), ``min_p`` (0..1) and ``seed``
  (the same seed gives the same text; no seed: a fresh one per request).
  Speculation keeps the sampled distribution exact (``engine/sampling.py``).
- A text ``prompt`` of ``/v1/completions`` that ends mid-word is token-healed
  (setting ``token_healing``): the completion finishes the word and starts
  where the prompt ends.
- llama.cpp's server's own fields, with its meaning: ``cache_prompt`` (false:
  the prompt is evaluated from scratch, none of the cache reused; default
  true) and ``return_tokens`` (true: the ``structspec`` field of a response
  that is not a stream lists the generated token ids as ``tokens``).
- Penalties, ``logit_bias``, ``logprobs``, ``echo``, ``best_of`` > 1,
  tools and JSON response formats are refused with a 400 rather than ignored,
  because ignoring them would silently change what the client asked for.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from structspec.engine.sampling import Sampling
from structspec.engine.stats import GenerationStats
from structspec.engine.stops import MAX_STOP_CHARS, MAX_STOPS

#: The engine's limit less one: a chat without a template stops at its transcript's
#: next turn too (``chat.PLAIN_STOP``).
MAX_STOP_STRINGS = MAX_STOPS - 1
ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(Exception):
    """An error answered in OpenAI's error format."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass
class CompletionRequest:
    """A validated request of either endpoint."""

    chat: bool
    model: str | None = None
    prompt: str | None = None
    prompt_tokens: list[int] | None = None
    suffix: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    user: str | None = None
    sampling: Sampling = Sampling()
    cache_prompt: bool = True
    return_tokens: bool = False

    @property
    def heals(self) -> bool:
        """Whether token healing applies: a text prompt continued at its end."""
        return not self.chat and self.prompt is not None and self.suffix is None


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def _type_name(value: Any) -> str:
    return {
        type(None): "null",
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(key, f"'{key}' must be a number, not {_type_name(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits: no float holds it
        raise _bad(key, f"'{key}' is too large") from None


def _int(body: dict[str, Any], key: str, lo: int, hi: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(key, f"'{key}' must be an integer, not {_type_name(value)}")
    if not lo <= value <= hi:
        raise _bad(key, f"'{key}' must be between {lo} and {hi}, not {value}")
    return value


def _bool(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _bad(key, f"'{key}' must be true or false, not {_type_name(value)}")
    return value


def _str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(key, f"'{key}' must be a string, not {_type_name(value)}")
    return value


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise _bad("stop", "'stop' must be a string or an array of strings")
    if len(value) > MAX_STOP_STRINGS:
        raise _bad("stop", f"'stop' may hold at most {MAX_STOP_STRINGS} strings, not {len(value)}")
    longest = max((len(v) for v in value), default=0)
    if longest > MAX_STOP_CHARS:
        raise _bad(
            "stop", f"a stop string may have at most {MAX_STOP_CHARS} characters, not {longest}"
        )
    return tuple(v for v in value if v)


def _content(message: dict[str, Any], index: int) -> str:
    content = message.get("content")
    where = f"messages[{index}].content"
    if content is None:
        if message.get("role") == "assistant":
            return ""
        raise _bad(where, f"'{where}' is required")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _bad(
                    f"{where}[{j}]",
                    f'\'{where}[{j}]\': only text parts ({{"type": "text", "text": ...}}) '
                    "are supported",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"{where}[{j}].text", f"'{where}[{j}].text' must be a string")
            texts.append(text)
        return "".join(texts)
    raise _bad(where, f"'{where}' must be a string or an array of text parts")


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("messages")
    if raw is None:
        raise _bad("messages", "'messages' is required")
    if not isinstance(raw, list) or not raw:
        raise _bad("messages", "'messages' must be a non-empty array of message objects")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise _bad(f"messages[{i}]", f"'messages[{i}]' must be an object, not {_type_name(m)}")
        role = m.get("role")
        if role not in ROLES:
            raise _bad(
                f"messages[{i}].role",
                f"'messages[{i}].role' must be one of {', '.join(ROLES)}, not {role!r}",
            )
        out.append({"role": role, "content": _content(m, i)})
    return out


def _prompt(body: dict[str, Any]) -> tuple[str | None, list[int] | None]:
    value = body.get("prompt")
    if value is None:
        raise _bad("prompt", "'prompt' is required")
    if isinstance(value, str):
        return value, None
    if isinstance(value, list):
        if len(value) == 1 and isinstance(value[0], str):
            return value[0], None
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return None, list(value)
        if value and all(isinstance(v, str) for v in value):
            raise _bad("prompt", "only one prompt per request is supported (send them one by one)")
    raise _bad("prompt", "'prompt' must be a string, a one-string array or an array of token ids")


def _ranged(body: dict[str, Any], key: str, lo: float, hi: float, default: float) -> float:
    value = _number(body, key)
    if value is None:
        return default
    if not lo <= value <= hi:  # NaN fails this too
        raise _bad(key, f"'{key}' must be between {lo:g} and {hi:g}, not {value:g}")
    return value


def _sampling(body: dict[str, Any]) -> Sampling:
    return Sampling(
        temperature=_ranged(body, "temperature", 0.0, 2.0, 0.0),
        top_k=max(0, _int(body, "top_k", -1, 1 << 30) or 0),
        top_p=_ranged(body, "top_p", 0.0, 1.0, 1.0),
        min_p=_ranged(body, "min_p", 0.0, 1.0, 0.0),
        seed=_int(body, "seed", -(1 << 63), (1 << 64) - 1),
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = _int(body, "n", 1, 128)
    if n not in (None, 1):
        raise _bad("n", "only n = 1 is supported (one answer per request)")
    best_of = _int(body, "best_of", 1, 128)
    if best_of not in (None, 1):
        raise _bad("best_of", "only best_of = 1 is supported")
    for key in ("presence_penalty", "frequency_penalty", "repeat_penalty"):
        value = _number(body, key)
        if value not in (None, 0.0) and not (key == "repeat_penalty" and value == 1.0):
            raise _bad(key, f"'{key}' is not supported; leave it out")
    if body.get("logit_bias") not in (None, {}):
        raise _bad("logit_bias", "'logit_bias' is not supported; leave it out")
    if body.get("logprobs") not in (None, False, 0):
        raise _bad("logprobs", "'logprobs' is not supported; leave it out")
    if body.get("top_logprobs") not in (None, 0):
        raise _bad("top_logprobs", "'top_logprobs' is not supported; leave it out")
    if _bool(body, "echo"):
        raise _bad("echo", "'echo' is not supported; leave it out")
    if body.get("tools") not in (None, []) or body.get("functions") not in (None, []):
        raise _bad("tools", "tools and function calling are not supported")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") in (None, "text")):
        raise _bad("response_format", "only the text response format is supported")


def parse_request(body: Any, *, chat: bool) -> CompletionRequest:
    """Validate a decoded JSON body; raise ``ApiError`` (400) naming the bad field."""
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {_type_name(body)}")
    req = CompletionRequest(chat=chat)
    req.model = _str(body, "model")
    if chat:
        req.messages = _messages(body)
        req.max_tokens = _int(body, "max_completion_tokens", 1, 1 << 20)
        if req.max_tokens is None:
            req.max_tokens = _int(body, "max_tokens", 1, 1 << 20)
    else:
        req.prompt, req.prompt_tokens = _prompt(body)
        req.suffix = _str(body, "suffix") or None
        if req.suffix is not None and req.prompt_tokens is not None:
            # (answering as if there were none is what it did)
            raise _bad("suffix", "'suffix' goes with a text prompt, not with token ids")
        req.max_tokens = _int(body, "max_tokens", 1, 1 << 20)
    req.stop = _stop(body)
    req.stream = bool(_bool(body, "stream"))
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise _bad("stream_options", "'stream_options' must be an object")
        req.include_usage = bool(_bool(options, "include_usage"))
    req.user = _str(body, "user")
    req.sampling = _sampling(body)
    req.cache_prompt = _bool(body, "cache_prompt") is not False
    req.return_tokens = bool(_bool(body, "return_tokens"))
    _refuse_unsupported(body)
    return req


# -- responses ----------------------------------------------------------------


def finish_reason(stop_reason: str) -> str:
    """Engine stop reasons to OpenAI's ``finish_reason``."""
    return "length" if stop_reason in ("length", "context") else "stop"


def usage(stats: GenerationStats) -> dict[str, int]:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.tokens,
        "total_tokens": stats.prompt_tokens + stats.tokens,
    }


def extension(
    stats: GenerationStats, warnings: list[str], tokens: list[int] | None = None
) -> dict[str, Any]:
    """structspec's own figures, in a ``structspec`` field clients ignore (``tokens``:
    the generated token ids, when the request asked for them)."""
    out: dict[str, Any] = {
        "passes": stats.passes,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "tokens_per_pass": round(stats.tokens_per_pass, 3),
        "reused_prompt_tokens": stats.reused_tokens,
        "prefill_ms": round(stats.prefill_ms, 2),
        "draft_ms": round(stats.draft_ms, 2),
        "decode_ms": round(stats.decode_ms, 2),
        "stop_reason": stats.stop_reason,
        "warnings": warnings,
    }
    if tokens is not None:
        out["tokens"] = tokens
    return out


class ResponseShape:
    """Builds the response objects of one request (one id and timestamp for all chunks)."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def full(
        self,
        text: str,
        stats: GenerationStats,
        warnings: list[str],
        tokens: list[int] | None = None,
    ) -> dict[str, Any]:
        reason = finish_reason(stats.stop_reason)
        if self.chat:
            out = self._base("chat.completion")
            out["choices"] = [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": reason,
                }
            ]
        else:
            out = self._base("text_completion")
            out["choices"] = [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason}]
        out["usage"] = usage(stats)
        out["structspec"] = extension(stats, warnings, tokens)
        return out

    def chunk(
        self, text: str | None, reason: str | None = None, *, first: bool = False
    ) -> dict[str, Any]:
        if self.chat:
            out = self._base("chat.completion.chunk")
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            out["choices"] = [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            ]
        else:
            out = self._base("text_completion")
            out["choices"] = [
                {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
            ]
        return out

    def usage_chunk(self, stats: GenerationStats, warnings: list[str]) -> dict[str, Any]:
        out = self._base("chat.completion.chunk" if self.chat else "text_completion")
        out["choices"] = []
        out["usage"] = usage(stats)
        out["structspec"] = extension(stats, warnings)
        return out
