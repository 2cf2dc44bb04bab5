"""Every decode kind, score activation and column selection of ``graft_nms``, through onnxruntime, against the
formulas written out in numpy here (bridge.passes.contrib.decode's docstring states them). The head is a model
whose outputs are its inputs, so the raw values are chosen by the test; the ``indices`` format returns every
decoded box, keypoint and score."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge.errors import UsageError
from bridge.graft import graft_nms

N, K = 12, 3  # boxes, keypoints


def _head(tmp_path: Path, width: int, classes: int) -> Path:
    model = make_model([helper.make_node("Identity", ["b"], ["boxes"]), helper.make_node("Identity", ["s"], ["scores"])],
                       [helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", N, width]),
                        helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", N, classes])],
                       [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", N, width]),
                        helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", N, classes])])
    path = tmp_path / "head.onnx"
    onnx.save(model, str(path))
    return path


def _run(model: onnx.ModelProto, b: np.ndarray, s: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, session.run(None, {"b": b, "s": s}), strict=True))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _corners(c: np.ndarray, wh: np.ndarray) -> np.ndarray:
    return np.concatenate([c - wh / 2, c + wh / 2], -1)


RNG = np.random.default_rng(0)
ANCHORS = np.concatenate([RNG.uniform(0.2, 0.8, (N, 2)), RNG.uniform(0.1, 0.4, (N, 2))], -1)  # (cx, cy, w, h)
STRIDES = RNG.choice([8.0, 16.0], (N, 1)).repeat(2, 1)


def ssd(d: np.ndarray, kp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c, s = ANCHORS[:, :2], ANCHORS[:, 2:]
    v = np.array([0.1, 0.2, 0.3, 0.4])
    box = _corners(d[..., :2] * v[:2] * s + c, np.exp(d[..., 2:] * v[2:]) * s)
    return box, kp * v[:2] * s[:, None] + c[:, None]


def linear(exp: bool) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    def run(d: np.ndarray, kp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c, s = ANCHORS[:, :2], ANCHORS[:, 2:]
        scale = np.array([128.0, 96.0, 64.0, 32.0])
        t = d[..., 2:] / scale[2:]
        box = _corners(d[..., :2] / scale[:2] * s + c, (np.exp(t) if exp else t) * s)
        return box, kp / scale[:2] * s[:, None] + c[:, None]
    return run


def yolo_v3(d: np.ndarray, kp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c, s = ANCHORS[:, :2], ANCHORS[:, 2:]
    return _corners((sigmoid(d[..., :2]) - 0.5) * STRIDES + c, np.exp(d[..., 2:]) * s), kp


def yolo_v5(d: np.ndarray, kp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c, s = ANCHORS[:, :2], ANCHORS[:, 2:]
    box = _corners((2 * sigmoid(d[..., :2]) - 1) * STRIDES + c, (2 * sigmoid(d[..., 2:])) ** 2 * s)
    return box, (2 * kp - 1) * STRIDES[:, None] + c[:, None]


def corners(d: np.ndarray, kp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return d, kp


def center_size(d: np.ndarray, kp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _corners(d[..., :2], d[..., 2:]), kp


CASES: list[tuple[str, dict[str, Any], Callable[..., Any], bool]] = [
    # (decode, options, numpy decode, keypoints)
    ("corners", {}, corners, True),
    ("center-size", {}, center_size, True),
    ("ssd", {"variances": (0.1, 0.2, 0.3, 0.4)}, ssd, True),
    ("linear", {"scales": (128, 96, 64, 32)}, linear(False), True),
    ("linear", {"scales": (128, 96, 64, 32), "exp_size": True}, linear(True), True),
    ("yolo-v3", {}, yolo_v3, False),
    ("yolo-v5", {}, yolo_v5, True),
]


@pytest.mark.parametrize("y_first", [False, True], ids=["x-first", "y-first"])
@pytest.mark.parametrize(("decode", "options", "reference", "with_keypoints"), CASES,
                         ids=[f"{c[0]}{'-exp' if c[1].get('exp_size') else ''}" for c in CASES])
def test_decode_kinds_match_their_formulas(tmp_path: Path, decode: str, options: dict[str, Any],
                                           reference: Callable[..., Any], with_keypoints: bool, y_first: bool) -> None:
    rng = np.random.default_rng(1)
    width = 2 + 4 + 2 * K + 1  # two unrelated columns, the box, the keypoints, one more
    raw = rng.normal(0, 1, (2, N, width)).astype(np.float32)
    if decode in ("corners", "center-size"):
        raw[..., 2:4] = rng.uniform(0.1, 0.5, (2, N, 2))
        raw[..., 4:6] = raw[..., 2:4] + rng.uniform(0.1, 0.4, (2, N, 2)) if decode == "corners" else \
            rng.uniform(0.1, 0.4, (2, N, 2))
    box_x, kp_x = raw[..., 2:6].astype(np.float64), raw[..., 6:6 + 2 * K].reshape(2, N, K, 2).astype(np.float64)
    layout = {"corners": ("xyxy", "yxyx"), "center-size": ("cxcywh", "cycxhw")}.get(decode, ("cxcywh", "cycxhw"))
    fmt = layout[1] if y_first else layout[0]
    anchors = np.concatenate([ANCHORS, STRIDES], -1) if decode.startswith("yolo") else ANCHORS
    if y_first:  # the values (and the anchor file) arrive y first: (y, x, h, w), keypoints (y, x)
        raw[..., 2:6] = raw[..., [3, 2, 5, 4]]
        raw[..., 6:6 + 2 * K] = raw[..., 6:6 + 2 * K].reshape(2, N, K, 2)[..., ::-1].reshape(2, N, 2 * K)
        anchors = anchors[:, [1, 0, 3, 2, 5, 4][: anchors.shape[1]]]
        if "variances" in options:
            options = {**options, "variances": tuple(np.array(options["variances"])[[1, 0, 3, 2]])}
    kwargs: dict[str, Any] = dict(decode=decode, box_format=fmt, box_columns="2:6", output_format="indices",
                                  background_class=None, **options)
    if with_keypoints:
        kwargs["keypoint_columns"] = f"6:{6 + 2 * K}"
    if decode not in ("corners", "center-size"):
        np.save(tmp_path / "anchors.npy", anchors.astype(np.float32))
        kwargs["anchors"] = str(tmp_path / "anchors.npy")
    grafted = graft_nms(_head(tmp_path, width, 2), boxes="boxes", scores="scores", **kwargs)
    out = _run(grafted, raw, rng.random((2, N, 2)).astype(np.float32))
    want_box, want_kp = reference(box_x, kp_x)
    got_box, got_kp = out["decoded_boxes"], out.get("decoded_keypoints")
    if y_first:  # outputs come back in the input's axis order
        got_box = got_box[..., [1, 0, 3, 2]]
        got_kp = got_kp[..., ::-1] if got_kp is not None else None
    np.testing.assert_allclose(got_box, want_box, rtol=1e-5, atol=1e-5)
    if with_keypoints:
        assert got_kp is not None and got_kp.shape == (2, N, K, 2)
        np.testing.assert_allclose(got_kp, want_kp, rtol=1e-5, atol=1e-4)
    else:
        assert got_kp is None


@pytest.mark.parametrize(("activation", "clip", "objectness", "columns"), [
    ("none", None, None, None),
    ("sigmoid", None, None, None),
    ("sigmoid", 1.5, None, "1:4"),
    ("softmax", None, None, "0:3"),
    ("sigmoid", None, 4, "1:4"),
])
def test_score_activation_clip_objectness_and_columns(tmp_path: Path, activation: str, clip: float | None,
                                                      objectness: int | None, columns: str | None) -> None:
    rng = np.random.default_rng(2)
    boxes = np.concatenate([rng.uniform(0, 0.5, (1, N, 2)), rng.uniform(0.5, 1, (1, N, 2)), rng.normal(0, 2, (1, N, 1))],
                           -1).astype(np.float32)
    logits = rng.normal(0, 2, (1, N, 4)).astype(np.float32)
    grafted = graft_nms(_head(tmp_path, 5, 4), boxes="boxes", scores="scores", box_columns="0:4", output_format="indices",
                        score_activation=activation, score_clip=clip, objectness_column=objectness,
                        score_columns=columns, background_class=None)
    got = _run(grafted, boxes, logits)["class_scores"]  # [B, C, N]
    start, stop = (int(v) for v in columns.split(":")) if columns else (0, 4)
    x = logits[..., start:stop].astype(np.float64)
    if clip is not None:
        x = np.clip(x, -clip, clip)
    want = {"none": x, "sigmoid": sigmoid(x), "softmax": np.exp(x) / np.exp(x).sum(-1, keepdims=True)}[activation]
    if objectness is not None:
        want = want * sigmoid(boxes[..., objectness:objectness + 1].astype(np.float64))
    np.testing.assert_allclose(got, want.transpose(0, 2, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(decode="linear"), "decodes against anchors: give --anchors"),
    (dict(decode="corners", box_format="cxcywh"), "contradicts --box-format"),
    (dict(decode="yolo-v3", anchors="A", keypoint_columns="4:6"), "has no keypoint rule"),
    (dict(decode="yolo-v5", anchors="A"), "needs the grid strides"),
    (dict(box_columns="0:3"), "a box needs 4"),
    (dict(keypoint_columns="4:7"), "keypoints are (x, y) pairs"),
    (dict(keypoint_columns="4:9"), "is outside 'boxes' (8 columns)"),
    (dict(scales=128), "--scale belongs to the linear decode"),
    (dict(nms="weighted", output_format="indices"), "needs --output-format boxes-scores-classes"),
    (dict(score_activation="relu"), "--score-activation must be one of"),
    (dict(decode="grid"), "--decode must be one of"),
])
def test_contradictory_options_are_usage_errors(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    if kwargs.get("anchors") == "A":
        np.save(tmp_path / "a.npy", ANCHORS.astype(np.float32))  # 4 columns: no strides
        kwargs = {**kwargs, "anchors": str(tmp_path / "a.npy")}
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        graft_nms(_head(tmp_path, 8, 2), boxes="boxes", scores="scores", **{"box_columns": "0:4", **kwargs})


def test_the_command_help_lists_every_registered_kind() -> None:
    """The CLI spells the choices out (its help imports no numpy); they must be the registries' names."""
    import typer

    from bridge.cli.graft import graft_nms_command
    from bridge.graft import DECODE_KINDS, NMS_KINDS, SCORE_ACTIVATIONS

    app = typer.Typer()
    app.command()(graft_nms_command)
    params = {p.name: p.help for p in typer.main.get_command(app).params}
    assert params["decode"].startswith(" | ".join(DECODE_KINDS) + " ")
    assert params["score_activation"] == " | ".join(SCORE_ACTIVATIONS)
    assert params["nms"].startswith(" | ".join(NMS_KINDS) + " ")
