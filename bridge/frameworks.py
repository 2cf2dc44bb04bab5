"""Framework imports and on-disk conventions shared by layers that must not import each other.

``import_tensorflow`` is how the TF adapter, the TF target and the TF runtime import TensorFlow
(quietly, or with a clear ``AdapterUnavailableError``). ``is_saved_model_dir`` and
``read_signature_map`` are the SavedModel conventions the TF target writes and the TF runtime
reads (the ONNX name -> signature key maps in ``assets.extra/bridge_signature.json``).
A leaf: it imports only ``bridge.errors`` and ``bridge.registry``, and TensorFlow only when called.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bridge.errors import AdapterUnavailableError
from bridge.registry import quiet_framework_logs

SIGNATURE_MAP = Path("assets.extra") / "bridge_signature.json"


def framework_found(name: str) -> bool:
    """Whether module ``name`` can be imported, without importing it (a check before a child process does)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def import_tensorflow(purpose: str) -> Any:
    """Import TensorFlow quietly (no C++ INFO banners) or raise AdapterUnavailableError for ``purpose``."""
    quiet_framework_logs()
    try:
        import tensorflow as tf
    except ImportError:
        raise AdapterUnavailableError("TensorFlow", purpose, extra="tensorflow") from None
    return tf


def is_saved_model_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and ((p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file())


def read_signature_map(saved_model: str | Path) -> dict[str, Any]:
    """The ONNX -> signature key maps the TF target stores in a SavedModel ({} for other SavedModels)."""
    path = Path(saved_model) / SIGNATURE_MAP
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data
