"""Fill-in-the-middle prompt templates, by model family or from the ``fimTemplate`` setting.

A protocol that takes one prompt string (``/v1/completions``, Ollama with
``raw``) needs the model's own FIM control tokens around the text before and
after the cursor. A template is a string with ``{prefix}`` and ``{suffix}``
(``{{`` and ``}}`` for literal braces); the known families are recognised by
their name inside the model's name (``backendModel`` or what the server
reports), so ``Qwen/Qwen2.5-Coder-7B`` and ``qwen2.5-coder:1.5b-base`` both get
Qwen's template.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass


@dataclass(frozen=True)
class FimTemplate:
    """A FIM prompt layout; ``family`` names where it came from (for messages)."""

    family: str
    layout: str

    def prompt(self, prefix: str, suffix: str) -> str:
        return self.layout.format(prefix=prefix, suffix=suffix)


#: Known families: a pattern over the lowercased model name, and the template.
FAMILIES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "Qwen2.5-Coder",
        re.compile(r"qwen[-_.]?(2\.5|3)[-_.]?coder"),
        "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>",
    ),
    (
        "StarCoder2",
        re.compile(r"starcoder"),
        "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>",
    ),
    (
        "DeepSeek-Coder",
        re.compile(r"deepseek[-_.]?coder"),
        "<\uff5cfim\u2581begin\uff5c>{prefix}<\uff5cfim\u2581hole\uff5c>{suffix}"
        "<\uff5cfim\u2581end\uff5c>",
    ),
    ("CodeLlama", re.compile(r"code[-_.]?llama"), "<PRE> {prefix} <SUF>{suffix} <MID>"),
    ("Codestral", re.compile(r"codestral"), "[SUFFIX]{suffix}[PREFIX]{prefix}"),
)


def parse_template(layout: str) -> FimTemplate:
    """The ``fimTemplate`` setting as a template; ``ValueError`` saying what is wrong."""
    try:
        fields = [
            (n, spec, conv)
            for _, n, spec, conv in string.Formatter().parse(layout)
            if n is not None
        ]
    except ValueError as exc:
        raise ValueError(f"fimTemplate {layout!r} is not a template: {exc}") from None
    if sorted(name for name, _, _ in fields) != ["prefix", "suffix"]:
        raise ValueError(
            f"fimTemplate must contain {{prefix}} and {{suffix}} once each and no other field, "
            f"not {layout!r}"
        )
    if any(spec or conv for _, spec, conv in fields):
        # {prefix!r} would send a Python repr, {prefix:>300000000} a 300 MB prompt
        raise ValueError(f"fimTemplate's fields take no conversion or format, not {layout!r}")
    return FimTemplate("fimTemplate", layout)


def template_for(model: str, setting: str = "") -> FimTemplate | None:
    """The template: the ``fimTemplate`` setting when set, else the family of ``model``.

    ``None`` when neither applies (the caller completes from the prefix alone).
    ``ValueError`` for a malformed setting.
    """
    if setting:
        return parse_template(setting)
    name = model.lower()
    for family, pattern, layout in FAMILIES:
        if pattern.search(name):
            return FimTemplate(family, layout)
    return None
