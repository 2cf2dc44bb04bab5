"""Make onnx-tf 1.10.0 (unmaintained) importable next to today's onnx, TensorFlow and Keras.

onnx-tf's last release imports three things that are gone or broken here:

- ``onnx.mapping`` (and ``from onnx.helper import mapping``): removed from onnx in 1.23. onnx-tf
  reads four tables from it (ONNX type <-> numpy dtype, storage type, storage field); the shim
  module below rebuilds exactly those four from ``onnx._mapping.TENSOR_TYPE_MAP`` / ``onnx.helper``.
- ``tensorflow_addons``: dead, and breaks on Keras 3. onnx-tf uses only ``tfa.seq2seq.hardmax``
  (the Hardmax handler); the stub provides that one function with plain TF ops (one-hot of the
  first arg-max along the last axis, ONNX Hardmax semantics) and raises a clear error for anything else.
- ``tensorflow_probability``: used only by the Bernoulli handler (``tfd.Bernoulli``); the stub
  raises a clear error when it is touched. The TF target's support check reports Bernoulli as
  unsupported before conversion starts, so users see that error, not this one.

onnx-tf 1.10.0 also lacks versioned handlers that today's exporters need; ``extend_handlers`` adds
them to onnx-tf's handler classes in memory (never on disk), each one narrow and tested:

- ``Squeeze``/``Unsqueeze`` version 13 (axes moved from attribute to input in opset 13; every
  exporter emits this form): axes are read as a static value (initializer, Constant or foldable);
- version 16 of ops whose opset-16 change only widened type constraints (bfloat16, optionals):
  Where, LeakyRelu, PRelu, GreaterOrEqual, LessOrEqual, If, Loop, Scan, and ScatterElements /
  ScatterND, whose new ``reduction`` attribute the TF target's support check only lets through as
  ``none`` (the behaviour of their version 13);
- a fix for GatherND with ``batch_dims > 0``: onnx-tf's index bounds check reshapes the indices to
  ``[prod(batch dims), last]``, which fails for more than one index tuple per batch (e.g. an SSD's
  per-image top-k gather); GatherND gets a bounds check that flattens to ``[-1, last]`` instead;
- the corrections of ``onnx_tf_fixes`` (handlers that exist but build the wrong graph: integer Div, GatherND /
  ScatterND with an index depth TensorFlow does not know) and the ONNX static shapes every handler's output
  gets while the TF target converts (``onnx_tf_fixes.onnx_static_shapes``).

Nothing in site-packages is changed. ``load_onnx_tf`` puts the shim and the stubs into
``sys.modules`` only while ``onnx_tf.backend`` is imported (onnx-tf's handler modules all bind
them at import time) and then restores ``sys.modules`` exactly, so code outside the TF target never
sees a fake ``onnx.mapping`` or ``tensorflow_addons``. Processes that never use the TF target never
import this module's effects at all.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import types
from collections.abc import Iterator
from typing import Any

from bridge.errors import AdapterUnavailableError, BridgeError

logger = logging.getLogger(__name__)

ONNX_TF_VERSION = "1.10.0"
INSTALL_HINT = "pip install --no-deps onnx-tf==1.10.0  (its declared tensorflow-addons dependency is not needed)"

# Module names the shim provides; restored (removed or put back) after onnx-tf is imported.
SHIMMED = ("onnx.mapping", "onnx.helper.mapping", "tensorflow_addons", "tensorflow_addons.seq2seq",
           "tensorflow_probability", "tensorflow_probability.distributions")

_loaded: Any = None  # the onnx_tf.backend module once imported


class OnnxTfCompatError(BridgeError):
    """onnx-tf reached a feature that needs a library bridge stubs out (tensorflow-addons / -probability)."""


def build_mapping_module() -> types.ModuleType:
    """A stand-in for the removed ``onnx.mapping`` with the four tables onnx-tf reads."""
    from onnx import TensorProto, helper
    from onnx._mapping import TENSOR_TYPE_MAP

    module = types.ModuleType("onnx.mapping", "bridge shim for onnx.mapping (removed in onnx 1.23); read by onnx-tf")
    to_np = {int(k): v.np_dtype for k, v in TENSOR_TYPE_MAP.items()}
    module.TENSOR_TYPE_TO_NP_TYPE = to_np  # type: ignore[attr-defined]
    # first ONNX type per numpy dtype, like the old table (which had no ml_dtypes entries)
    np_to_onnx: dict[Any, int] = {}
    for k, dtype in to_np.items():
        np_to_onnx.setdefault(dtype, k)
    module.NP_TYPE_TO_TENSOR_TYPE = np_to_onnx  # type: ignore[attr-defined]
    module.TENSOR_TYPE_TO_STORAGE_TENSOR_TYPE = {  # type: ignore[attr-defined]
        int(k): int(v.storage_dtype) for k, v in TENSOR_TYPE_MAP.items()
    }
    fields: dict[int, str] = {}
    for k in TENSOR_TYPE_MAP:
        with contextlib.suppress(Exception):  # types without a storage field (undefined) are skipped
            fields[int(helper.tensor_dtype_to_storage_tensor_dtype(k))] = helper.tensor_dtype_to_field(k)
    fields.setdefault(int(TensorProto.UINT16), "int32_data")  # old table's entry for float16's storage
    module.STORAGE_TENSOR_TYPE_TO_FIELD = fields  # type: ignore[attr-defined]
    return module


def _hardmax(x: Any) -> Any:
    """ONNX Hardmax on the last axis: 1 at the first maximum, 0 elsewhere (as tfa.seq2seq.hardmax)."""
    import tensorflow as tf

    x = tf.convert_to_tensor(x)
    return tf.one_hot(tf.argmax(x, axis=-1), depth=tf.shape(x)[-1], dtype=x.dtype)


class _Unavailable(types.ModuleType):
    """A stub module: every attribute not defined explicitly raises OnnxTfCompatError naming the feature."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name, f"bridge stub: {reason}")
        self._reason = reason

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise OnnxTfCompatError(f"{self.__name__}.{attr} is not available in bridge's TF target: {self._reason}")


def build_stub_modules() -> dict[str, types.ModuleType]:
    tfa = _Unavailable("tensorflow_addons", "tensorflow-addons is dead and breaks on Keras 3; only "
                       "tfa.seq2seq.hardmax (for ONNX Hardmax) is provided")
    seq2seq = _Unavailable("tensorflow_addons.seq2seq", "only hardmax is provided")
    seq2seq.hardmax = _hardmax  # type: ignore[attr-defined]
    tfa.seq2seq = seq2seq  # type: ignore[attr-defined]
    tfp = _Unavailable("tensorflow_probability", "ONNX Bernoulli needs tensorflow-probability, which bridge "
                       "does not install (it needs tf-keras on Keras 3); Bernoulli is unsupported by the TF target")
    tfd = _Unavailable("tensorflow_probability.distributions", tfp._reason)
    tfp.distributions = tfd  # type: ignore[attr-defined]
    return {"tensorflow_addons": tfa, "tensorflow_addons.seq2seq": seq2seq,
            "tensorflow_probability": tfp, "tensorflow_probability.distributions": tfd}


@contextlib.contextmanager
def shimmed_modules() -> Iterator[None]:
    """Insert the shim and stubs into sys.modules for the duration; restore sys.modules exactly afterwards.

    A real, already-imported module of the same name is left in place (never shadowed).
    """
    mapping = build_mapping_module()
    fakes: dict[str, types.ModuleType] = {"onnx.mapping": mapping, "onnx.helper.mapping": mapping}
    fakes.update(build_stub_modules())
    saved = {name: sys.modules.get(name) for name in fakes}
    for name, module in fakes.items():
        if saved[name] is None:
            sys.modules[name] = module
    try:
        yield
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous


def load_onnx_tf() -> Any:
    """Import and return ``onnx_tf.backend`` through the shim (once per process).

    Raises AdapterUnavailableError when TensorFlow or onnx-tf is not installed.
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    from bridge.frameworks import import_tensorflow

    import_tensorflow("the TensorFlow target")
    before = set(sys.modules)
    with shimmed_modules():
        try:
            backend = importlib.import_module("onnx_tf.backend")
        except ModuleNotFoundError as exc:
            _forget_partial(before)
            if exc.name and exc.name.split(".")[0] == "onnx_tf":
                raise AdapterUnavailableError("onnx-tf", "the TensorFlow target", INSTALL_HINT) from None
            raise
        except Exception:
            _forget_partial(before)
            raise
    _quiet_onnx_tf_logger()
    extend_handlers()
    version = getattr(importlib.import_module("onnx_tf.version"), "version", "?")
    if version != ONNX_TF_VERSION:
        logger.warning("onnx-tf %s is installed; bridge's compatibility layer was written for %s", version,
                       ONNX_TF_VERSION)
    _loaded = backend
    return backend


def _forget_partial(before: set[str]) -> None:
    """Drop half-imported onnx_tf modules so a later attempt starts clean."""
    for name in set(sys.modules) - before:
        if name.split(".")[0] == "onnx_tf":
            sys.modules.pop(name, None)


def _quiet_onnx_tf_logger() -> None:
    """onnx-tf attaches its own console handler to the 'onnx-tf' logger at import; records should go
    through the application's logging instead. prepare() calls ``handlers[0].setLevel``, so a
    NullHandler takes the console handler's place rather than leaving the list empty."""
    lg = logging.getLogger("onnx-tf")
    lg.handlers = [logging.NullHandler()]


# op -> the handler version whose code is correct for opset 16 too (the 16 change only widened types)
TYPE_ONLY_16 = {"Where": 9, "LeakyRelu": 6, "PRelu": 9, "GreaterOrEqual": 12, "LessOrEqual": 12, "If": 13,
                "Loop": 13, "Scan": 11, "ScatterElements": 13, "ScatterND": 13}


def _static_axes(node: Any, tensor_dict: dict[str, Any]) -> list[int] | None:
    """The axes input of a Squeeze/Unsqueeze-13 node as ints (None when the node has no axes input)."""
    import numpy as np
    import tensorflow as tf

    if len(node.inputs) < 2 or not node.inputs[1]:
        return None
    value = tf.get_static_value(tensor_dict[node.inputs[1]])
    if value is None:
        raise OnnxTfCompatError(f"{node.op_type} '{node.name}': axes are computed at run time; the TF target "
                                "needs them constant")
    return [int(a) for a in np.ravel(value)]


def _squeeze_13(cls: Any, node: Any, **kwargs: Any) -> list[Any]:
    import tensorflow as tf

    x = kwargs["tensor_dict"][node.inputs[0]]
    axes = _static_axes(node, kwargs["tensor_dict"])
    return [tf.squeeze(x) if axes is None else tf.squeeze(x, axis=axes)]


def _unsqueeze_13(cls: Any, node: Any, **kwargs: Any) -> list[Any]:
    import tensorflow as tf

    x = kwargs["tensor_dict"][node.inputs[0]]
    axes = _static_axes(node, kwargs["tensor_dict"]) or []
    if x.shape.rank is None:  # onnx-tf leaves some ranks unknown (e.g. after tf2onnx's combined NMS)
        if any(a < 0 for a in axes):
            raise OnnxTfCompatError(f"Unsqueeze '{node.name}': negative axes {axes} on a tensor whose rank TensorFlow "
                                    "does not know; the TF target needs non-negative axes there")
        normalised = list(axes)  # non-negative axes of the output need no rank
    else:
        rank = x.shape.rank + len(axes)
        normalised = [a % rank for a in axes]
    for axis in sorted(normalised):  # ascending, so each axis is final when inserted
        x = tf.expand_dims(x, axis=axis)
    return [x]


def _gather_nd_bounds(cls: Any, data: Any, indices: Any, batch_dims: int = 0) -> Any:
    """True when every index tuple lies in [-dim, dim) of the data axes it addresses (ONNX GatherND)."""
    import tensorflow as tf

    depth = tf.shape(indices)[-1]
    flat = tf.reshape(indices, tf.stack([-1, depth]))
    limits = tf.cast(tf.shape(data)[batch_dims:batch_dims + depth], indices.dtype)
    return tf.reduce_all(tf.logical_and(flat >= -limits, flat < limits))


def extend_handlers() -> list[str]:
    """Add the missing versioned handlers listed in the module docstring; returns ``Op.version_N`` added."""
    from onnx_tf.backend import TensorflowBackend
    from onnx_tf.handlers.backend_handler import BackendHandler

    from bridge.targets.onnx_tf_fixes import install

    classes = {c.ONNX_OP: c for c in BackendHandler.__subclasses__() if c.DOMAIN in ("", "ai.onnx")}
    added: list[str] = []

    def add(op: str, version: int, fn: Any) -> None:
        cls = classes.get(op)
        if cls is not None and not hasattr(cls, f"version_{version}"):
            setattr(cls, f"version_{version}", classmethod(fn))
            added.append(f"{op}.version_{version}")

    add("Squeeze", 13, _squeeze_13)
    add("Unsqueeze", 13, _unsqueeze_13)
    for op, previous in TYPE_ONLY_16.items():
        cls = classes.get(op)
        if cls is not None and hasattr(cls, f"version_{previous}"):
            add(op, 16, getattr(cls, f"version_{previous}").__func__)
    gather_nd = classes.get("GatherND")
    if gather_nd is not None and "chk_idx_out_of_bounds" not in vars(gather_nd):
        gather_nd.chk_idx_out_of_bounds = classmethod(_gather_nd_bounds)
        added.append("GatherND.chk_idx_out_of_bounds (batch_dims fix)")
    added.extend(install(classes, TensorflowBackend))
    if added:
        logger.debug("extended onnx-tf handlers: %s", ", ".join(added))
    return added
