"""onnxruntime on bridge's converted SSDs vs MXNet on the source graphs, and the share of decode + NMS.

For each model (``bench.ssd_models``) and batch size:
  * ``bridge.api.convert`` (no validation) to a static-batch model, and once with a dynamic batch axis;
  * MXNet (Module, NaiveEngine, OMP threads = T) and onnxruntime (intra-op threads = T, spinning off)
    run the same random image batch, interleaved round by round; ratio = MXNet / onnxruntime;
  * decode + NMS alone: MXNet's C++ MultiBoxDetection (``mx.nd.contrib``) vs bridge's lowering of the
    same node (one-node ``bridge.contrib`` model through the pipeline's lowering + folding), fed with the
    model's own cls_prob / loc_pred / anchors; its share = lowered time / whole-model onnxruntime time.
    The lowering reads class scores class-last (``Transpose(cls_prob)``, which cancels against the
    Transpose after the Softmax in a converted model), so the one-node model is fed class-last through a
    Transpose that ``TransposePairPass`` cancels, as in the converted model;
  * the share as the converted model has it: whole converted model vs the same model cut before the
    lowered MultiBoxDetection (``cut_before``: the values its nodes read become the outputs), same rounds.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from bench.ssd_models import Built
from bridge.bench.timing import Timing, interleaved

CUTS = ("multibox_loc_pred", "cls_prob", "multibox_anchors")


def ort_session(model: str | Path | bytes, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), so,
                                providers=["CPUExecutionProvider"])


def convert(built: Built, out: Path, batch: int, *, dynamic: bool = False) -> Path:
    """bridge convert --validate none (static batch, or batch dynamic)."""
    from bridge import api

    if not out.exists():
        api.convert(str(built.symbol), out, inputs=[f"data:{batch},3,{built.spec.size},{built.spec.size}"],
                    dynamic=["data:0=batch"] if dynamic else (), validate=[])
    return out


def mx_module(mx: Any, built: Built, batch: int) -> Callable[[np.ndarray], list[np.ndarray]]:
    """Forward of the deploy symbol; returns [detections, loc_pred, cls_prob, anchors] as numpy."""
    sym, args, aux = mx.model.load_checkpoint(str(built.symbol).removesuffix("-symbol.json"), 0)
    internals = sym.get_internals()
    group = mx.sym.Group([sym, *(internals[f"{c}_output"] for c in CUTS)])
    mod = mx.mod.Module(group, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (batch, 3, built.spec.size, built.spec.size))], for_training=False)
    mod.set_params(args, aux, allow_missing=False)
    def run(x: np.ndarray) -> list[np.ndarray]:
        mod.forward(mx.io.DataBatch(data=[mx.nd.array(x)]), is_train=False)
        return [o.asnumpy() for o in mod.get_outputs()]

    return run


class _NSizedMultiBoxDetectionPass:
    """The lowering as it was before the candidate-first rewrite (N-sized score matrix, mask and sorts):
    ``MultiBoxParts.mxnet_rows``, kept for the before/after row of the benchmark."""

    def __new__(cls) -> Any:
        from bridge.passes.contrib import LowerMultiBoxDetectionPass
        from bridge.rewriting.attrs import required_floats

        class Legacy(LowerMultiBoxDetectionPass):
            def rewrite(self, b: Any, node: Any) -> Any:
                return [self._parts(b, node, required_floats(node, "variances")).mxnet_rows(b)]

        return Legacy()


def lowered_detection(attrs: dict[str, Any], num_classes: int, anchors: np.ndarray, batch: int,
                      legacy: bool = False, output_format: str = "mxnet") -> bytes:
    """bridge's lowering of one MultiBoxDetection node (static shapes), serialized, with the anchors as an
    initializer as in a converted SSD (MultiBoxPrior folds to one); ``legacy``: the N-sized lowering
    from before the candidate-first rewrite, fed ``cls_prob`` [B, C+1, N]. The current lowering is fed
    ``cls_prob_last`` [B, N, C+1] (``detection_feeds``) through a Transpose, as a converted SSD's Softmax
    output reaches it (the Transpose pair cancels). ``output_format`` boxes-scores-classes: the padded
    layout, 100 detections per image."""
    num_anchors = anchors.shape[1]
    from bridge.passes.cleanup import FoldConstantsPass
    from bridge.passes.contrib import LowerMultiBoxDetectionPass
    from bridge.passes.layout import TransposePairPass

    a: dict[str, Any] = {"clip": int(attrs["clip"]), "threshold": float(attrs["threshold"]), "background_id": 0,
         "nms_threshold": float(attrs["nms_threshold"]), "force_suppress": int(attrs["force_suppress"]),
         "variances": [float(v) for v in attrs["variances"]], "nms_topk": int(attrs["nms_topk"])}
    node = helper.make_node("MultiBoxDetection", ["cls_prob", "loc_pred", "anchors"], ["detections"],
                            name="detection", domain="bridge.contrib", **a)
    vi = helper.make_tensor_value_info
    nodes = [node]
    cls_input = vi("cls_prob", TensorProto.FLOAT, [batch, num_classes + 1, num_anchors])
    if not legacy:
        nodes.insert(0, helper.make_node("Transpose", ["cls_prob_last"], ["cls_prob"], perm=[0, 2, 1]))
        cls_input = vi("cls_prob_last", TensorProto.FLOAT, [batch, num_anchors, num_classes + 1])
    graph = helper.make_graph(nodes, "nms", [cls_input, vi("loc_pred", TensorProto.FLOAT, [batch, 4 * num_anchors])],
                              [vi("detections", TensorProto.FLOAT, [batch, num_anchors, 6])],
                              initializer=[onnx.numpy_helper.from_array(anchors.astype(np.float32), "anchors")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("bridge.contrib", 1)])
    model.ir_version = 8
    irm = ir.serde.deserialize_model(model)
    passes = [_NSizedMultiBoxDetectionPass()] if legacy else [
        LowerMultiBoxDetectionPass(output_format, 100 if output_format == "boxes-scores-classes" else None)]
    for p in (*passes, FoldConstantsPass(), TransposePairPass()):
        irm = p(irm).model
    return ir.serde.serialize_model(irm).SerializeToString()


def detection_feeds(cls_prob: np.ndarray, loc_pred: np.ndarray, legacy: bool = False) -> dict[str, np.ndarray]:
    """The inputs of ``lowered_detection``'s model from MXNet's cls_prob [B, C+1, N] and loc_pred."""
    if legacy:
        return {"cls_prob": cls_prob, "loc_pred": loc_pred}
    return {"cls_prob_last": np.ascontiguousarray(cls_prob.transpose(0, 2, 1)), "loc_pred": loc_pred}


def detection_node(built: Built) -> str:
    """Name of the MultiBoxDetection node in the model's symbol (the lowered nodes are named after it)."""
    nodes = json.loads(Path(built.symbol).read_text())["nodes"]
    return next(n["name"] for n in nodes if n["op"] in ("_contrib_MultiBoxDetection", "MultiBoxDetection"))


def cut_before(whole: Path, out: Path, node: str) -> Path:
    """The converted model cut before the lowered ``node``: every value its nodes (named ``<node>/...``)
    read from the rest of the graph becomes an output, and whatever only the lowering needed is dropped."""
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    if out.exists():
        return out
    model = ir.load(whole)
    prefix = f"{node}/"
    outputs: list[ir.Value] = []
    for n in model.graph:
        if not (n.name or "").startswith(prefix):
            continue
        for v in n.inputs:
            producer = v.producer() if v is not None else None
            if v is not None and producer is not None and not (producer.name or "").startswith(prefix) and \
                    producer.op_type != "Constant" and v not in outputs:
                outputs.append(v)
    if not outputs:
        raise RuntimeError(f"{whole}: no nodes named {prefix}... read values from the rest of the graph")
    model.graph.outputs.clear()
    model.graph.outputs.extend(outputs)
    RemoveUnusedNodesPass()(model)
    ir.save(model, out)
    return out


@dataclass
class SSDRow:
    model: str
    batch: int
    anchors: int
    mxnet: Timing
    ort: Timing
    ort_dynamic: Timing | None
    nms_mxnet: Timing
    nms_ort: Timing
    parity: bool  # onnxruntime's detections agree with MXNet's end to end (detection-aware)
    ort_cut: Timing | None = None  # the converted model cut before the lowered MultiBoxDetection
    nms_max_diff: float = 0.0  # lowered MultiBoxDetection vs MXNet's operator on the same tensors, max |diff|
    dynamic_error: str = ""  # why no dynamic-batch model could be made, when it could not

    @property
    def ratio(self) -> float:
        return self.mxnet.median / self.ort.median

    @property
    def nms_share(self) -> float:
        return self.nms_ort.median / self.ort.median

    @property
    def cut_share(self) -> float:
        """(whole - cut) / whole: decode + NMS as the converted model runs it."""
        assert self.ort_cut is not None
        return (self.ort.median - self.ort_cut.median) / self.ort.median

    @property
    def nms_ratio(self) -> float:
        return self.nms_mxnet.median / self.nms_ort.median

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "batch": self.batch, "anchors": self.anchors, "mxnet": self.mxnet.to_dict(),
                "onnxruntime": self.ort.to_dict(),
                "onnxruntime_dynamic_batch": self.ort_dynamic.to_dict() if self.ort_dynamic else None,
                "nms_mxnet": self.nms_mxnet.to_dict(), "nms_onnxruntime": self.nms_ort.to_dict(),
                "ratio_mxnet_over_ort": self.ratio, "nms_share_of_ort": self.nms_share,
                "nms_ratio_mxnet_over_ort": self.nms_ratio, "parity": self.parity, "nms_max_diff": self.nms_max_diff,
                "dynamic_error": self.dynamic_error,
                "onnxruntime_cut": self.ort_cut.to_dict() if self.ort_cut else None,
                "nms_share_whole_vs_cut": self.cut_share if self.ort_cut else None}


def same_detections(ref: np.ndarray, got: np.ndarray) -> bool:
    """Detection-aware agreement of two [B, N, 6] outputs (bridge.validation.detection.matching: matched by class and
    IoU, scores within tolerance, ties allowed); end to end the backbones differ by float rounding, so
    near-equal scores may swap rows."""
    from bridge.validation.detection.matching import compare_detections, from_mxnet

    return ref.shape == got.shape and compare_detections(from_mxnet(ref), from_mxnet(got)).passed


def bench_ssd(mx: Any, built: Built, batch: int, *, threads: int, rounds: int, workdir: Path,
              dynamic: bool = True) -> SSDRow:
    spec = built.spec
    x = np.random.default_rng(batch).uniform(-1, 1, (batch, 3, spec.size, spec.size)).astype(np.float32)
    whole = convert(built, workdir / f"{spec.name}-b{batch}.onnx", batch)
    static = ort_session(whole, threads)
    cut = ort_session(cut_before(whole, workdir / f"{spec.name}-b{batch}-cut.onnx", detection_node(built)), threads)
    dyn = None
    dynamic_error = ""
    if dynamic:
        from bridge.errors import BridgeError

        try:
            dyn = ort_session(convert(built, workdir / f"{spec.name}-dyn.onnx", batch, dynamic=True), threads)
        except BridgeError as exc:  # e.g. Pooling(pooling_convention=full) needs static shapes
            dynamic_error = str(exc).splitlines()[0]
    mx_run = mx_module(mx, built, batch)
    ref_det, loc_pred, cls_prob, anchors = mx_run(x)
    (got,) = static.run(None, {"data": x})
    parity = same_detections(ref_det, got)
    nms_sess = ort_session(lowered_detection(spec.detection, spec.num_classes, anchors, batch), threads)
    feeds = detection_feeds(cls_prob, loc_pred)
    nd = [mx.nd.array(cls_prob), mx.nd.array(loc_pred), mx.nd.array(anchors)]
    nms_diff = float(np.abs(nms_sess.run(None, feeds)[0] -
                            mx.nd.contrib.MultiBoxDetection(*nd, **spec.detection).asnumpy()).max())

    def mx_nms() -> object:
        return mx.nd.contrib.MultiBoxDetection(*nd, **spec.detection).asnumpy()

    ways: dict[str, Callable[[], object]] = {
        "mxnet": lambda: mx_run(x), "ort": lambda: static.run(None, {"data": x}),
        "ort_cut": lambda: cut.run(None, {"data": x}),
        "nms_mxnet": mx_nms, "nms_ort": lambda: nms_sess.run(None, feeds)}
    if dyn is not None:
        ways["ort_dynamic"] = lambda: dyn.run(None, {"data": x})
    t = interleaved(ways, rounds)
    return SSDRow(spec.name, batch, built.num_anchors, t["mxnet"], t["ort"], t.get("ort_dynamic"), t["nms_mxnet"],
                  t["nms_ort"], parity, t["ort_cut"], nms_diff, dynamic_error)


def profile_lowered_nms(attrs: dict[str, Any], num_classes: int, anchors: np.ndarray, batch: int,
                        feeds: dict[str, np.ndarray], threads: int, runs: int = 20) -> dict[str, float]:
    """onnxruntime's per-op-type time share (enable_profiling) of the lowered MultiBoxDetection."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = str(Path(tmp) / "nms")
        sess = ort.InferenceSession(lowered_detection(attrs, num_classes, anchors, batch), so,
                                    providers=["CPUExecutionProvider"])
        for _ in range(runs):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    by_op: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"]["op_name"]
            by_op[op] = by_op.get(op, 0.0) + e["dur"]
    total = sum(by_op.values()) or 1.0
    return dict(sorted(((k, v / total) for k, v in by_op.items()), key=lambda kv: -kv[1]))


__all__ = ["SSDRow", "bench_ssd", "convert", "cut_before", "detection_feeds", "detection_node", "lowered_detection",
           "onnx", "profile_lowered_nms"]
