"""The error opset conversion raises: names the op and its nodes that block a conversion."""

from __future__ import annotations

from bridge.errors import BridgeError


class OpsetConversionError(BridgeError):
    """The model cannot be converted to the requested opset; names the op (and its nodes) that blocks it."""
