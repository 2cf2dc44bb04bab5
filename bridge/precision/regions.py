"""Which nodes of an ONNX model may compute in reduced precision and which stay float, found from the graph's
structure alone (no op names, no framework knowledge).

The rule (one place; every target's quantizer is given its result):

1. *Feature tensors* are the float tensors computed from a model input through data inputs only: a node's
   output is a feature when one of its **data inputs** is (``DATA_INPUTS``: a Reshape's shape, a Gather's
   indices, a Slice's bounds, a Where's condition, a Resize's sizes, a RoiAlign's boxes ... are not data)
   and the output is float. An integer or boolean tensor (a comparison, ArgMax, TopK's indices, NMS's
   selection, a Shape) ends the chain: what is computed from it again (a ``Cast(bool) -> MatMul`` in an NMS
   lowering) is index arithmetic, not features.
2. *Trunk layers* are the Conv, ConvTranspose, MatMul and Gemm nodes whose activation (input 0) is a feature
   tensor and whose weight (input 1) is a constant: the network's learned layers.
3. A node is **quantized** when it is a trunk layer or lies upstream of one along feature tensors (the
   backbone and the heads, up to each path's last trunk layer). **Everything else stays float**: whatever is
   computed after the last trunk layer of each path - the box decode, the Concat of anchors, Softmax /
   Sigmoid scores, TopK, NonMaxSuppression and their inputs - and every index, shape or geometry
   computation, wherever it sits.

``head_tensors`` are the tensors where the quantized region hands over to the float one (a detector's raw
box and class predictions): the per-layer cost of quantization (``bridge.precision.sensitivity``) is
measured there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx

TRUNK_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                         onnx.TensorProto.BFLOAT16})
# the inputs that carry values (the others are indices, shapes, sizes, boxes or conditions); ops not listed:
# every input is data
DATA_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (0,), "Expand": (0,), "Tile": (0,), "Slice": (0,), "Pad": (0, 2), "Squeeze": (0,),
    "Unsqueeze": (0,), "Resize": (0,), "Upsample": (0,), "Gather": (0,), "GatherElements": (0,),
    "GatherND": (0,), "ScatterND": (0, 2), "ScatterElements": (0, 2), "Where": (1, 2), "RoiAlign": (0,),
    "MaxRoiPool": (0,), "TopK": (0,), "Split": (0,), "Compress": (0,), "CumSum": (0,), "ReduceSum": (0,),
    "ReduceMean": (0,), "ReduceMax": (0,), "ReduceMin": (0,), "ReduceProd": (0,), "ReduceL2": (0,),
    "Clip": (0,), "OneHot": (2,), "Trilu": (0,), "DepthToSpace": (0,), "SpaceToDepth": (0,),
    "NonMaxSuppression": (), "Range": (), "ConstantOfShape": (), "Shape": (), "Size": (), "NonZero": (),
}
# ops whose outputs are never float features (indices, masks, shapes)
NON_FEATURE_OPS = frozenset({"Shape", "Size", "NonZero", "NonMaxSuppression", "ArgMax", "ArgMin", "Equal",
                             "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or", "Xor",
                             "IsNaN", "IsInf", "Range", "ConstantOfShape"})


@dataclass
class Region:
    """The split of a model's nodes (by name): ``trunk`` layers, the ``quantized`` region (trunk layers and
    what feeds them), the nodes that stay ``float``, and the ``head_tensors`` between the two."""

    trunk: list[str] = field(default_factory=list)
    quantized: list[str] = field(default_factory=list)
    float: list[str] = field(default_factory=list)
    head_tensors: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (f"{len(self.trunk)} trunk layers (Conv/ConvTranspose/MatMul/Gemm on features) and the "
                f"{len(self.quantized) - len(self.trunk)} nodes feeding them quantized; {len(self.float)} nodes "
                "after each path's last trunk layer or on index/shape paths stay float")

    def to_dict(self) -> dict[str, object]:
        return {"trunk": self.trunk, "quantized": len(self.quantized), "float": len(self.float),
                "head_tensors": self.head_tensors, "rule": RULE}


RULE = ("quantized: Conv/ConvTranspose/MatMul/Gemm with a constant weight on image features (trunk layers) and "
        "every node feeding them through data inputs; float: everything after each path's last trunk layer "
        "(decode, anchors, scores, TopK/NMS and their inputs) and every index, shape or geometry computation")


def node_names(model: onnx.ModelProto) -> list[str]:
    """Every node's name; unnamed nodes get ``<op>_<index>`` (written back, so quantizers see the same names)."""
    names = []
    for index, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
        names.append(node.name)
    return names


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name -> ONNX element type, from the graph's declarations and shape inference where it works."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # a model inference rejects still has its declared types
        inferred = model
    types: dict[str, int] = {}
    graph = inferred.graph
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
    return types


def _constants(model: onnx.ModelProto) -> set[str]:
    """Tensors whose value is fixed: initializers, Constant outputs, and DequantizeLinear of constants."""
    known = {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" or (node.op_type in ("DequantizeLinear", "Identity", "Cast")
                                          and node.input and all(i in known for i in node.input if i)):
            known.update(node.output)
    return known


def data_inputs(node: onnx.NodeProto) -> list[str]:
    indices = DATA_INPUTS.get(node.op_type)
    inputs = list(node.input)
    picked = inputs if indices is None else [inputs[i] for i in indices if i < len(inputs)]
    return [i for i in picked if i]


def split_region(model: onnx.ModelProto, keep_float: Iterable[str] = ()) -> Region:
    """The ``Region`` of ``model`` (module docstring); ``keep_float``: node names the user keeps float too."""
    names = node_names(model)
    types = _elem_types(model)
    constants = _constants(model)
    graph_inputs = {i.name for i in model.graph.input} - {i.name for i in model.graph.initializer}
    features = {n for n in graph_inputs if types.get(n, onnx.TensorProto.FLOAT) in FLOAT_TYPES}
    nodes = list(model.graph.node)
    # nodes are topologically ordered in a valid ONNX graph: one forward sweep marks every feature tensor
    for node in nodes:
        if node.op_type in NON_FEATURE_OPS:
            continue
        if any(i in features for i in data_inputs(node)):
            for out, index in zip(node.output, range(len(node.output)), strict=True):
                if node.op_type == "TopK" and index == 1:
                    continue  # TopK's indices
                if out and types.get(out, onnx.TensorProto.FLOAT) in FLOAT_TYPES:
                    features.add(out)
    trunk = [name for name, node in zip(names, nodes, strict=True)
             if node.op_type in TRUNK_OPS and len(node.input) > 1 and node.input[0] in features
             and node.input[1] in constants]
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    quantized: set[int] = set()
    stack = [names.index(t) for t in trunk]
    while stack:  # backwards from each trunk layer along feature tensors
        i = stack.pop()
        if i in quantized:
            continue
        quantized.add(i)
        for tensor in data_inputs(nodes[i]):
            j = producer.get(tensor)
            if j is not None and tensor in features and j not in quantized:
                stack.append(j)
    kept = set(keep_float)
    quantized = {i for i in quantized if names[i] not in kept}
    consumers: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(nodes):
        for tensor in node.input:
            consumers[tensor].append(i)
    outputs = {o.name for o in model.graph.output}
    heads = [out for i in sorted(quantized) for out in nodes[i].output
             if out in features and (out in outputs or any(c not in quantized for c in consumers.get(out, ())))]
    return Region(trunk=[t for t in trunk if t not in kept], quantized=[names[i] for i in sorted(quantized)],
                  float=[names[i] for i in range(len(nodes)) if i not in quantized],
                  head_tensors=list(dict.fromkeys(heads)))


__all__ = ["DATA_INPUTS", "RULE", "TRUNK_OPS", "Region", "data_inputs", "node_names", "split_region"]
