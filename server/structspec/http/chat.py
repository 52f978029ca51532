"""Chat messages to a prompt: the model's own chat template, or a plain transcript.

The template comes from the GGUF metadata (``tokenizer.chat_template``), asked
of the model object (``LlamaModel.chat_template()``). It is rendered with
Jinja2 in a sandbox, with the variables Hugging Face templates expect
(``messages``, ``bos_token``, ``eos_token``, ``add_generation_prompt``,
``raise_exception``, ``strftime_now``).

A model without a template (the default Gemma 3 270M is a base model and has
none; so does the stand-in) gets a plain transcript::

    <system text>

    User: <message>
    Assistant: <message>
    User: <message>
    Assistant:

and generation stops at the next ``"\\nUser:"``. Templates that fail to render
(a template that raises, an unsupported construct) are a 400 for that request,
with the template's own message.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any

from structspec.model.base import Model

PLAIN_STOP = "\nUser:"


class TemplateError(ValueError):
    """The chat template could not be rendered for these messages."""


@dataclass(frozen=True)
class ChatPrompt:
    text: str
    stop: tuple[str, ...]
    has_bos: bool  # the text already starts with the BOS token's text


def model_chat_template(model: Model) -> str | None:
    """The chat template of ``model`` from its GGUF metadata, or ``None``."""
    getter = getattr(model, "chat_template", None)
    if callable(getter):
        try:
            template = getter()
        except Exception:  # noqa: BLE001 - a model without metadata access has no template
            return None
        return template if isinstance(template, str) and template.strip() else None
    return None


def _token_text(model: Model, token: int | None) -> str:
    if token is None:
        return ""
    return model.token_bytes(token).decode("utf-8", "replace")


def _eos_text(model: Model) -> str:
    """The EOS token's text, from the GGUF metadata when the model exposes it."""
    metadata = getattr(model, "metadata", None)
    if not callable(metadata):
        return ""
    try:
        value = metadata("tokenizer.ggml.eos_token_id")
        return _token_text(model, int(value)) if value is not None else ""
    except (ValueError, TypeError):
        return ""


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def render_template(template: str, messages: list[dict[str, Any]], model: Model) -> ChatPrompt:
    """Render a Jinja2 chat template (sandboxed) for ``messages``."""
    from jinja2 import TemplateError as JinjaError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # As Hugging Face renders them: with ``{% break %}``/``{% continue %}`` and a
    # ``tojson`` that writes plain JSON (Jinja's escapes HTML and takes no
    # ``ensure_ascii``), which templates of real models use.
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    bos = _token_text(model, model.bos_token())
    try:
        text = env.from_string(template).render(
            messages=messages,
            bos_token=bos,
            eos_token=_eos_text(model),
            add_generation_prompt=True,
        )
    except TemplateError:
        raise
    except JinjaError as exc:
        raise TemplateError(f"the model's chat template failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - templates are outside input; any failure is a 400
        raise TemplateError(
            f"the model's chat template failed: {type(exc).__name__}: {exc}"
        ) from None
    has_bos = bool(bos) and text.startswith(bos)
    return ChatPrompt(text[len(bos) :] if has_bos else text, (), has_bos)


def render_plain(messages: list[dict[str, Any]]) -> ChatPrompt:
    """The plain transcript used when the model has no chat template."""
    parts: list[str] = []
    for m in messages:
        role, content = m["role"], m["content"]
        if role in ("system", "developer"):
            parts.append(f"{content}\n\n")
        elif role == "assistant":
            parts.append(f"Assistant: {content}\n")
        else:
            parts.append(f"User: {content}\n")
    parts.append("Assistant:")
    return ChatPrompt("".join(parts), (PLAIN_STOP,), False)


def chat_prompt(template: str | None, messages: list[dict[str, Any]], model: Model) -> ChatPrompt:
    """The prompt for ``messages``: the model's template if it has one, else plain."""
    if template:
        return render_template(template, messages, model)
    return render_plain(messages)
