"""Telling a node's own error from error it inherits: the local check behind a culprit verdict.

A flat tolerance cannot judge intermediate tensors alone: float32 rounding differences of the inputs
(each within tolerance) are amplified by every accumulation downstream, so a deep Convolution can
differ by more than ``atol`` on a few elements of a correct model, and an elementwise Add on top of it
inherits that. Blaming such a node sends the user after a translator that is right.

So a tensor that differs is re-judged *locally*: the candidate nodes that compute it from its
frontier (``GraphIndex.frontier``) run in onnxruntime on the **reference's** values of that frontier,
and only that output is compared with the reference. What remains is the node's own error. It is
judged against the tolerance widened by the region's float32 sensitivity, measured the same way the
rounding arises: the frontier's float values are moved by one unit in the last place (random
direction, fixed seed) and the region re-run; ``NOISE_FACTOR`` times the largest resulting change is
allowed on top of ``atol + rtol * |ref|``. That is the rounding-error bound of the region's own
arithmetic (for a dot product of n terms: about sqrt(n) * eps * the terms' magnitude, the order at which
two correct float32 implementations differ), measured instead of derived per op, so it serves any
region (Conv, Gemm, pooling, Softmax, ...). A wrong weight, attribute or op differs at the scale of
the values themselves, orders of magnitude above it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from bridge.config import CONTRIB_DOMAIN, Tolerance
from bridge.debug.tensors import TensorError
from bridge.validation.graph import GraphIndex

NOISE_FACTOR = 32.0  # allowed multiple of the region's measured one-ulp sensitivity
SEED = 0


@dataclass(frozen=True)
class LocalCheck:
    """The candidate region's output from the reference's inputs, compared with the reference output."""

    error: TensorError  # judged with the widened tolerance
    noise: float  # the measured float32 sensitivity (largest change from one-ulp input moves)

    @property
    def own_error(self) -> bool:
        return not self.error.agree


def region_model(index: GraphIndex, region: Sequence[int], frontier: Sequence[str], tensor: str,
                 values: Mapping[str, np.ndarray]) -> onnx.ModelProto | None:
    """The nodes ``region`` of ``index``'s graph as a model from ``frontier`` (typed after ``values``) to
    ``tensor``; None where it cannot run alone (bridge.contrib ops, subgraphs reading outer values)."""
    g = index.model.graph
    nodes = [g.node[k] for k in sorted(region)]
    if not nodes or any(n.domain == CONTRIB_DOMAIN for n in nodes):
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in nodes for a in n.attribute):
        return None
    if any(name not in values for name in frontier):
        return None
    used = {i for n in nodes for i in n.input if i}
    produced = {o for n in nodes for o in n.output if o}
    missing = used - produced - set(frontier) - index.initializers
    if missing:  # an input neither computed here, given, nor a constant
        return None
    inputs = []
    for name in frontier:
        v = np.asarray(values[name])
        try:
            elem = helper.np_dtype_to_tensor_dtype(v.dtype)
        except Exception:
            return None
        inputs.append(helper.make_tensor_value_info(name, elem, list(v.shape)))
    graph = helper.make_graph(list(nodes), "region", inputs, [helper.make_value_info(tensor, onnx.TypeProto())],
                              initializer=[t for t in g.initializer if t.name in used])
    model = helper.make_model(graph, opset_imports=list(index.model.opset_import))
    model.ir_version = index.model.ir_version
    model.functions.extend(index.model.functions)
    return model


def _one_ulp(values: Mapping[str, np.ndarray], frontier: Sequence[str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    out = {}
    for name in frontier:
        v = np.asarray(values[name])
        if v.dtype.kind == "f" and v.size:
            toward = np.where(rng.random(v.shape) < 0.5, -np.inf, np.inf).astype(v.dtype)
            moved = np.nextafter(v, toward)
            out[name] = np.where(np.isfinite(v), moved, v).astype(v.dtype)
        else:
            out[name] = v
    return out


def local_check(index: GraphIndex, region: Sequence[int], frontier: Sequence[str], tensor: str,
                values: Mapping[str, np.ndarray], tolerance: Tolerance) -> LocalCheck | None:
    """Judge ``tensor``'s own error: ``values`` holds the reference's frontier values and its ``tensor``.
    None when the region cannot be run on its own (the caller falls back to the frontier rule)."""
    if tensor not in values:
        return None
    model = region_model(index, region, frontier, tensor, values)
    if model is None:
        return None
    from bridge.runtimes.onnxruntime import OnnxRuntime

    runtime = OnnxRuntime(model, log_severity=3)
    try:
        runtime.activate()
        feed = {k: np.asarray(values[k]) for k in frontier}
        (local,) = runtime.session.run([tensor], feed)
        (moved,) = runtime.session.run([tensor], _one_ulp(values, frontier))
    except Exception:  # a region onnxruntime will not run alone: no local verdict
        return None
    finally:
        runtime.deactivate()
    ref = np.asarray(values[tensor])
    local, moved = np.asarray(local), np.asarray(moved)
    if local.shape != ref.shape:
        if local.size != ref.size:
            return LocalCheck(TensorError(False, None, None, None,
                                          f"shape {list(local.shape)} != reference {list(ref.shape)}"), 0.0)
        local, moved = local.reshape(ref.shape), moved.reshape(ref.shape)
    if ref.dtype.kind not in "fiub" or local.dtype.kind not in "fiub":
        same = bool(np.array_equal(ref, local))
        return LocalCheck(TensorError(same, None, None, None if same else 1.0, "compared for equality"), 0.0)
    if ref.size == 0:
        return LocalCheck(TensorError(True, 0.0, 0.0, 0.0, "empty"), 0.0)
    atol, rtol = tolerance.for_output(tensor)
    with np.errstate(all="ignore"):
        r64, c64, m64 = (a.astype(np.float64) for a in (ref, local, moved))
        shift = np.abs(m64 - c64)
        finite_shift = shift[np.isfinite(shift)]
        noise = float(finite_shift.max()) if finite_shift.size else 0.0
        diff = np.abs(c64 - r64)
        allowed = atol + rtol * np.abs(r64) + NOISE_FACTOR * noise
        same_nonfinite = (np.isnan(r64) & np.isnan(c64)) | (np.isinf(r64) & (r64 == c64))
        close = (diff <= allowed) | same_nonfinite
        both = np.isfinite(r64) & np.isfinite(c64)
        max_abs = float(diff[both].max()) if both.any() else None
        nz = both & (r64 != 0)
        max_rel = float((diff[nz] / np.abs(r64[nz])).max()) if nz.any() else (0.0 if max_abs == 0 else None)
    note = f"from the reference's inputs; float32 sensitivity {noise:.3g} (x{NOISE_FACTOR:g} allowed)"
    return LocalCheck(TensorError(bool(close.all()), max_abs, max_rel, float(1.0 - close.mean()), note), noise)
