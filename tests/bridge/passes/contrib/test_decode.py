"""The MXNet SSD lowerings (MultiBoxDetection in every output format, box_decode) build their box decode through
``decode.DECODERS["ssd"]``, the registry graft-nms selects decodes from. Differential test against the node-building
code they had before (``nms.decode_halves`` / ``nms.decode_interleaved`` as of 32aa8c9, kept verbatim below as the
plain path, swapped into the registry for the "before" conversion): the trained ``examples/mxnet_ssd`` and bench's
``tiny`` SSD converted with every ``--detection-format``, and one-node MultiBoxDetection / box_decode models with
per-axis variances and both clips, give the same graph (ops, attributes, edges, weights) and the same outputs bit
for bit on several inputs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from contrib_testlib import contrib_model, corner_anchors, lower, run_ort, separated_probs
from support import REPO

import bridge
from bridge.passes.contrib import LowerBoxDecodePass, LowerMultiBoxDetectionPass, nms
from bridge.passes.contrib.decode import DECODERS, AnchorValues, DecodeSettings
from bridge.rewriting.builder import F32, Builder

FORMATS = ("mxnet", "boxes-scores-classes", "indices")


# ---- the plain path: the decode as the lowerings built it before they went through the registry (verbatim) ----


def _pairs(b: Builder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    return b.slice(x, -1, 0, 2), b.slice(x, -1, 2, 4)


def decode_halves(b: Builder, deltas: ir.Value, anchors: nms.AnchorParts, stds: Sequence[float],
                  exp_clip: float | None = None, clip_unit: bool = False) -> tuple[ir.Value, ir.Value]:
    d_xy, d_wh = _pairs(b, deltas)
    v = [float(np.float32(s)) for s in stds]
    v_xy = b.f32(v[0]) if v[0] == v[1] else b.const(np.array(v[:2], np.float32))
    v_wh = b.f32(v[2]) if v[2] == v[3] else b.const(np.array(v[2:], np.float32))
    o_xy = b.op("Add", b.op("Mul", b.op("Mul", d_xy, v_xy), anchors.size), anchors.center)
    t_wh = b.op("Mul", d_wh, v_wh)
    if exp_clip is not None:
        t_wh = b.op("Min", t_wh, b.f32(exp_clip))
    e_wh = b.cast(b.op("Exp", b.cast(t_wh, ir.DataType.DOUBLE)), F32)
    o_wh = b.op("Div", b.op("Mul", e_wh, anchors.size), b.f32(2.0))
    low, high = b.op("Sub", o_xy, o_wh), b.op("Add", o_xy, o_wh)
    if clip_unit:
        one, zero = b.f32(1.0), b.f32(0.0)
        low, high = (b.op("Max", b.op("Min", v, one), zero) for v in (low, high))
    return low, high


def decode_interleaved(b: Builder, deltas: ir.Value, anchors: nms.AnchorParts, stds: Sequence[float],
                       clip_unit: bool = False) -> tuple[ir.Value, ir.Value]:
    quads = b.op("Reshape", deltas, b.i64(0, -1, 2, 2))
    halves = b.op("Reshape", b.op("Transpose", quads, perm=[0, 2, 1, 3]), b.i64(0, 2, -1))
    d_xy, d_wh = b.slice(halves, 1, 0, 1), b.slice(halves, 1, 1, 2)
    center = b.op("Reshape", anchors.center, b.i64(0, 1, -1))
    size = b.op("Reshape", anchors.size, b.i64(0, 1, -1))
    v = [float(np.float32(s)) for s in stds]

    def per_axis(vx: float, vy: float) -> ir.Value:
        if vx == vy:
            return b.f32(vx)
        return b.op("Tile", b.const(np.array([[[vx, vy]]], np.float32)),
                    b.op("Concat", b.i64(1, 1), b.dim(deltas, 1), axis=0))

    o_xy = b.op("Add", b.op("Mul", b.op("Mul", d_xy, per_axis(v[0], v[1])), size), center)
    t_wh = b.op("Mul", d_wh, per_axis(v[2], v[3]))
    e_wh = b.cast(b.op("Exp", b.cast(t_wh, ir.DataType.DOUBLE)), F32)
    o_wh = b.op("Div", b.op("Mul", e_wh, size), b.f32(2.0))
    low, high = b.op("Sub", o_xy, o_wh), b.op("Add", o_xy, o_wh)
    if clip_unit:
        one, zero = b.f32(1.0), b.f32(0.0)
        low, high = (b.op("Clip", v_, zero, one) for v_ in (low, high))
    return low, high


CALLS: list[str] = []


def _plain_rows(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> tuple[ir.Value, ir.Value]:
    assert anchors is not None
    CALLS.append("rows")
    return decode_halves(b, raw, nms.AnchorParts(anchors.center, anchors.size), s.variances, s.exp_clip, s.clip_unit)


def _plain_interleaved(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings
                       ) -> tuple[ir.Value, ir.Value]:
    assert anchors is not None and s.exp_clip is None  # the old interleaved decode had no exp clip
    CALLS.append("interleaved")
    return decode_interleaved(b, raw, nms.AnchorParts(anchors.center, anchors.size), s.variances, s.clip_unit)


@pytest.fixture
def plain() -> Iterator[list[str]]:
    """The calls of the plain path (a test checks that its "before" conversion used it, the "after" did not)."""
    CALLS.clear()
    yield CALLS


class _Plain:
    """Within it, the registry's ssd decode is the plain path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch

    def __enter__(self) -> None:
        self.monkeypatch.setitem(DECODERS, "ssd", dataclasses.replace(DECODERS["ssd"], boxes=_plain_rows,
                                                                      interleaved=_plain_interleaved))

    def __exit__(self, *exc: object) -> None:
        self.monkeypatch.undo()


def _graph(model: onnx.ModelProto) -> tuple[Any, ...]:
    """What the graph computes: every node's op, domain, attributes and edges, in order, and the weights."""
    nodes = [(n.op_type, n.domain, [a.SerializeToString() for a in n.attribute], list(n.input), list(n.output))
             for n in model.graph.node]
    return nodes, sorted((t.name, t.SerializeToString()) for t in model.graph.initializer)


def _same(before: Sequence[np.ndarray], after: Sequence[np.ndarray]) -> None:
    assert len(before) == len(after)
    for x, y in zip(before, after, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), np.abs(x.astype(np.float64) - y).max()


# ---- trained and bench SSDs, converted whole ----


def _ssd_inputs(size: int) -> list[np.ndarray]:
    sample = np.load(REPO / "examples" / "mxnet_ssd" / "sample_inputs.npz")["data"]  # mean-subtracted images
    rng = np.random.default_rng(7)
    return [sample[:1], sample[1:4], (rng.standard_normal((2, 3, size, size)) * 60).astype(np.float32),
            rng.uniform(-130, 130, (1, 3, size, size)).astype(np.float32)]


def _ssd(mx: ModuleType, name: str) -> Path:
    if name == "example":
        return REPO / "examples" / "mxnet_ssd" / "model"
    from bench.ssd_models import build

    return Path(str(build(mx, name).symbol).removesuffix("-symbol.json"))


@pytest.mark.parametrize("detection_format", FORMATS)
@pytest.mark.parametrize("name", ["example", "tiny"])
def test_converted_ssds_are_the_same_through_the_registry(mx: ModuleType, name: str, detection_format: str,
                                                           tmp_path: Path, plain: list[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _ssd(mx, name)
    options = dict(detection_format=detection_format, validate=[], inputs=["data:1,3,64,64"],
                   dynamic=["data:0=batch"], isolated=False)
    with _Plain(monkeypatch):
        bridge.convert(str(prefix), tmp_path / "before.onnx", **options)
    assert plain, "the plain decode was not used: the lowering does not go through the registry"
    plain.clear()
    bridge.convert(str(prefix), tmp_path / "after.onnx", **options)
    assert not plain
    before, after = (onnx.load(str(tmp_path / f"{w}.onnx")) for w in ("before", "after"))
    assert _graph(before) == _graph(after)
    for x in _ssd_inputs(64):
        _same(run_ort(before, {"data": x}), run_ort(after, {"data": x}))


# ---- one-node lowerings over the decode's options: per-axis variances, MultiBoxDetection's clip, box_decode's ----

B, C, N = 2, 3, 60
MULTIBOX: list[dict[str, Any]] = [
    dict(clip=1, variances=[0.1, 0.1, 0.2, 0.2], nms_topk=-1),
    dict(clip=0, variances=[0.1, 0.2, 0.3, 0.15], nms_topk=8),
    dict(clip=1, variances=[0.2, 0.1, 0.1, 0.4], nms_topk=20, force_suppress=1),
]


@pytest.mark.parametrize("detection_format", FORMATS)
@pytest.mark.parametrize("attrs", MULTIBOX, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_multibox_detection_is_the_same_through_the_registry(attrs: dict[str, Any], detection_format: str,
                                                             plain: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    a = {**dict(threshold=0.01, background_id=0, nms_threshold=0.45, force_suppress=0), **attrs}
    model = contrib_model("MultiBoxDetection", {"cls_prob": ["batch", C + 1, N], "loc_pred": ["batch", 4 * N],
                                                "anchors": [1, N, 4]}, {"detections": ["batch", N, 6]}, **a)
    with _Plain(monkeypatch):
        before = lower(model, LowerMultiBoxDetectionPass(detection_format))
    assert plain
    after = lower(model, LowerMultiBoxDetectionPass(detection_format))
    assert _graph(before) == _graph(after)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        feeds = {"cls_prob": separated_probs(rng, B, C, N),
                 "loc_pred": (rng.standard_normal((B, 4 * N)) * (0.5 + seed)).astype(np.float32),
                 "anchors": corner_anchors(rng, N)}
        _same(run_ort(before, feeds), run_ort(after, feeds))


@pytest.mark.parametrize("attrs", [dict(format="center"), dict(format="corner", std0=0.1, std1=0.2, std2=0.3, std3=0.4),
                                   dict(clip=0.5, format="corner", std2=2.0, std3=2.0)],
                         ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_box_decode_is_the_same_through_the_registry(attrs: dict[str, Any], plain: list[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    a = {**dict(std0=1.0, std1=1.0, std2=1.0, std3=1.0, clip=-1.0), **attrs}
    model = contrib_model("box_decode", {"data": ["batch", N, 4], "anchors": [1, N, 4]}, {"out": ["batch", N, 4]}, **a)
    with _Plain(monkeypatch):
        before = lower(model, LowerBoxDecodePass())
    assert plain
    after = lower(model, LowerBoxDecodePass())
    assert _graph(before) == _graph(after)
    rng = np.random.default_rng(4)
    for scale in (0.5, 3.0):
        x = (rng.standard_normal((B, N, 4)) * scale).astype(np.float32)
        xy, wh = rng.random((1, N, 2)) * 300, rng.random((1, N, 2)) * 80 + 4
        anchors = np.concatenate([xy, wh] if a["format"] == "center" else [xy, xy + wh], -1).astype(np.float32)
        _same(run_ort(before, {"data": x, "anchors": anchors}), run_ort(after, {"data": x, "anchors": anchors}))
