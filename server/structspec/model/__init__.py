"""The model layer: the ``Model`` protocol and its implementations."""

from structspec.model.base import (
    FimTokens,
    Model,
    ModelError,
    Rows,
    TokenCheck,
    common_prefix_len,
)
from structspec.model.standin import StandInModel

__all__ = [
    "FimTokens",
    "Model",
    "ModelError",
    "Rows",
    "StandInModel",
    "TokenCheck",
    "common_prefix_len",
]
