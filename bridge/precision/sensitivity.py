"""What quantizing each layer costs, measured one layer at a time on calibration images.

For every quantized node of a QDQ model, a copy of the fp32 model gets exactly that node's quantization
(the QuantizeLinear / DequantizeLinear pairs on its inputs and outputs and its quantized weight and bias,
copied from the QDQ model, so the same scales and zero points) and nothing else; it runs on a few
calibration images beside the fp32 model. The cost is the relative squared error it causes at the head
tensors (``bridge.precision.regions``: where the quantized region hands over to the float one, e.g. an
SSD's raw box and class predictions), averaged over the heads:

    cost(layer) = mean over heads h of  sum (y_h(layer quantized) - y_h(fp32))^2 / sum y_h(fp32)^2

Measured at the heads rather than at the detections, because the decode and NMS after them are
discontinuous (a box crossing a threshold) while the heads respond smoothly. The fallback keeps the most
costly layers float first; the dataset judges whether that was enough.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from bridge.precision.onnx_int8 import quantized_nodes

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LayerCost:
    """One layer's cost (relative squared error at the heads when only it is quantized)."""

    node: str
    op: str
    cost: float

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "op": self.op, "cost": self.cost}


def only_node_quantized(fp32: onnx.ModelProto, qdq: onnx.ModelProto, node_name: str,
                        watch: Sequence[str]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``fp32`` with ``node_name`` quantized as ``qdq`` quantizes it; the ``watch`` tensors as outputs.
    Returns the model and watch tensor -> the tensor that holds it there (a watched output that got a
    Q/DQ pair is read after it)."""
    model = copy.deepcopy(fp32)
    graph = model.graph
    producer = {out: n for n in qdq.graph.node for out in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in qdq.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    qinits = {i.name: i for i in qdq.graph.initializer}
    target_q = next(n for n in qdq.graph.node if n.name == node_name)
    index = next(k for k, n in enumerate(graph.node) if n.name == node_name)
    target = graph.node[index]
    have = {i.name for i in graph.initializer}
    before: list[onnx.NodeProto] = []
    after: list[onnx.NodeProto] = []
    suffix = "__only_" + node_name

    def copy_chain(chain: list[onnx.NodeProto], float_input: str | None) -> str:
        """Copy QDQ nodes ``chain`` (Q then DQ, or a lone DQ of a constant) with renamed outputs; returns the
        last output's new name."""
        last = ""
        rename: dict[str, str] = {}
        for n in chain:
            new = copy.deepcopy(n)
            new.name = n.name + suffix
            inputs = [rename.get(i, i) for i in new.input]
            if n.op_type == "QuantizeLinear" and float_input is not None:
                inputs[0] = float_input
            del new.input[:]
            new.input.extend(inputs)
            for k, out in enumerate(list(new.output)):
                rename[out] = out + suffix
                new.output[k] = out + suffix
            for i in new.input:
                if i in qinits and i not in have:
                    graph.initializer.append(qinits[i])
                    have.add(i)
            before.append(new)
            last = new.output[0]
        return last

    for k, name in enumerate(target_q.input):
        dq = producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear" or k >= len(target.input):
            continue
        q = producer.get(dq.input[0])
        if q is not None and q.op_type == "QuantizeLinear":
            target.input[k] = copy_chain([q, dq], target.input[k])
        else:  # a quantized constant (weight, bias)
            target.input[k] = copy_chain([dq], None)
    mapping = {w: w for w in watch}
    for out in target_q.output:
        qs = [c for c in consumers.get(out, ()) if c.op_type == "QuantizeLinear"]
        if not qs:
            continue
        dqs = [c for c in consumers.get(qs[0].output[0], ()) if c.op_type == "DequantizeLinear"]
        if not dqs:
            continue
        start = len(before)
        new_out = copy_chain([qs[0], dqs[0]], out)
        after.extend(before[start:])
        del before[start:]
        for n in graph.node:
            if n is not target:
                for k, i in enumerate(n.input):
                    if i == out:
                        n.input[k] = new_out
        if out in mapping:
            mapping[out] = new_out
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes[:index], *before, nodes[index], *after, *nodes[index + 1:]])
    _expose(model, mapping.values())
    return model, mapping


def _expose(model: onnx.ModelProto, tensors: Any) -> None:
    """Make ``tensors`` graph outputs (float32, shape left open)."""
    present = {o.name for o in model.graph.output}
    for t in tensors:
        if t not in present:
            model.graph.output.append(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None))
            present.add(t)


def _session(model: onnx.ModelProto) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def layer_costs(fp32: onnx.ModelProto, qdq: onnx.ModelProto, heads: Sequence[str], samples: Sequence[dict[str, np.ndarray]],
                *, progress: Progress | None = None, layers: Sequence[str] | None = None) -> list[LayerCost]:
    """The cost of every node of ``qdq`` the region rule quantizes and the quantizer did (or of ``layers``), most
    costly first (module docstring)."""
    from bridge.precision.regions import split_region

    say = progress or (lambda _m: None)
    if layers is None:
        done = set(quantized_nodes(qdq))
        layers = [n for n in split_region(fp32).quantized if n in done]
    names = list(layers)
    fp32_names = {n.name for n in fp32.graph.node}
    names = [n for n in names if n in fp32_names]
    ops = {n.name: n.op_type for n in fp32.graph.node}
    reference_model = copy.deepcopy(fp32)
    _expose(reference_model, heads)
    ref_session = _session(reference_model)
    reference = [ref_session.run(list(heads), feeds) for feeds in samples]
    costs = []
    start = time.perf_counter()
    for k, name in enumerate(names):
        model, mapping = only_node_quantized(fp32, qdq, name, heads)
        session = _session(model)
        watched = [mapping[h] for h in heads]
        # per head: the squared error over every sample image relative to the head's energy; then the mean
        num = np.zeros(len(heads))
        den = np.zeros(len(heads))
        for ref, feeds in zip(reference, samples, strict=True):
            for h, (r, g) in enumerate(zip(ref, session.run(watched, feeds), strict=True)):
                num[h] += float(np.sum((g.astype(np.float64) - r) ** 2))
                den[h] += float(np.sum(r.astype(np.float64) ** 2))
        per_head = np.where(den > 0, num / np.where(den > 0, den, 1), np.where(num > 0, np.inf, 0.0))
        costs.append(LayerCost(name, ops.get(name, "?"), float(np.mean(per_head)) if len(heads) else 0.0))
        if time.perf_counter() - start > 2:
            say(f"per-layer cost: {k + 1}/{len(names)} layers measured")
    return sorted(costs, key=lambda c: -c.cost)


__all__ = ["LayerCost", "layer_costs", "only_node_quantized"]
