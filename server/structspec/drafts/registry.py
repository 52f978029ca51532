"""How each draft source is built from its entry in ``structspec.sources``.

The list of sources (``SOURCES``, ``SOURCE_NAMES``, ``resolve_sources``) is
plain data at the bottom layer (``structspec.sources``), so that ``config``,
the language table and the completion layer read it without this package;
editors pass names through and the server warns about unknown ones
(``config.apply``). A source's module (its tree-sitter grammars, numpy, rule
files) is imported only when the source is built. A source class declares::

    name: ClassVar[str]                    # its registry name
    priors: ClassVar[Mapping[str, float]]  # starting acceptance per `name` or `name:tier`

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> DraftSource: ...
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from structspec.sources import SOURCES, resolve_sources

if TYPE_CHECKING:
    from structspec.drafts.base import DraftSource
    from structspec.model.base import Model


@dataclass(frozen=True)
class SourceOptions:
    """Options of the sources that have any (``rules_file``: a mined rules file)."""

    rules_file: str = ""


def source_class(name: str) -> Any:
    """The class of source ``name`` (importing its module now), its priors validated."""
    entry = next((s for s in SOURCES if s.name == name), None)
    if entry is None:
        raise ValueError(f"unknown draft source {name!r}")
    cls = getattr(importlib.import_module(entry.module), entry.cls)
    check_priors(name, cls.priors)
    if cls.name != name:
        raise TypeError(f"{entry.module}.{entry.cls}.name is {cls.name!r}, registered as {name!r}")
    return cls


def check_priors(name: str, priors: Mapping[str, float]) -> None:
    """A source's priors must be keyed ``name`` or ``name:tier``, each in ``(0, 1]``."""
    for key, value in priors.items():
        if key.partition(":")[0] != name:
            raise ValueError(f"source {name!r} declares a prior for another source: {key!r}")
        if not (isinstance(value, float | int) and math.isfinite(value) and 0.0 < value <= 1.0):
            raise ValueError(f"source {name!r}: prior {key!r} = {value!r} is not in (0, 1]")


def build_sources(names: Iterable[str], model: Model, *, rules_file: str = "") -> list[DraftSource]:
    """Fresh sources for ``names``, in the order of ``SOURCE_NAMES``."""
    options = SourceOptions(rules_file=rules_file)
    return [source_class(name).build(model, options) for name in resolve_sources(names)]
