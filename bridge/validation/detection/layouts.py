"""Detector output layouts: which graph outputs hold detections and how to read them, for any framework.

A ``DetectionSpec`` names a layout and the output that plays each role in it, for the candidate
(the converted model) and for the reference (the source framework; by default the same layout and
names). ``compare_outputs`` reads both sides into per-image ``Detections`` and compares them
detection-aware (``bridge.validation.detection.matching``) instead of elementwise. Layouts (roles, shapes):

``mxnet``                 detections [B, N, 6] rows (class, score, x1, y1, x2, y2); class < 0 = none
``yolo``                  detections [N, 7] rows (batch_index, x1, y1, x2, y2, score, class), the
                          column order of the ONNX-NMS "end2end" YOLO exports but with score before
                          class; rows with batch_index < 0 are padding
``boxes-scores-classes``  TF combined NMS, zero padded: boxes [B, K, 4], scores [B, K], labels [B, K],
                          num [B] (the first num rows of each image are real); optional keypoints
                          [B, K, P, 2] (``bridge graft-nms --keypoint-columns``) and masks [B, K, ...]
``indices``               ONNX NonMaxSuppression: selected_indices [K, 3] (batch, class, box),
                          boxes [B, N, 4], scores [B, C, N]
``boxes-scores-labels``   torchvision per image: boxes [K, 4], scores [K], labels [K] (optional;
                          class 0 when absent), optional batch_index [K] to split a flat batch, and
                          optional masks [K, ...] and keypoints [K, P, 2] (compared between matched
                          detections, the dataset run scores keypoints per matched detection); or GluonCV
                          batched (ids, scores, bboxes): boxes [B, N, 4], scores / labels [B, N(, 1)],
                          rows with label < 0 are padding

Boxes are corner (x1, y1, x2, y2) unless ``box_format`` says ``yxyx``, ``xywh`` or ``cxcywh``
(IoU is the same for xyxy and yxyx as long as both sides agree).

The CLI form (``--detections``) is ``ROLE=NAME,...`` with optional ``layout=``, ``name=`` and
``box_format=``: ``boxes=B,scores=S,labels=L[,batch_index=I][,num=N]``; the layout follows from the
roles (``num`` -> boxes-scores-classes, ``selected_indices`` -> indices, else boxes-scores-labels),
``detections=D`` needs ``layout=mxnet`` or ``layout=yolo``.

Serialised in the model metadata key ``bridge.detection_outputs`` as a JSON list of spec objects;
``load_detection_specs`` also reads the old form ``{source_output: format}`` written for lowered
MultiBoxDetection layers (reference in MXNet's [B, N, 6] layout, candidate in ``format`` with the
lowering's ``<source_output>_<suffix>`` names).

``detect_detection_outputs`` finds detector outputs in a graph on its own: outputs computed from a
NonMaxSuppression node (torchvision-style traced graphs gather boxes, scores and labels with NMS's
selected indices), given roles by name hints, then by rank, element type and output order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx

from bridge.errors import UsageError
from bridge.validation.detection.matching import (
    Detections,
    as_class_ids,
    detection_output_names,
    from_indices,
    from_mxnet,
    from_padded,
)

# layout -> (required roles, optional roles)
LAYOUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "mxnet": (("detections",), ()),
    "yolo": (("detections",), ()),
    "boxes-scores-classes": (("boxes", "scores", "labels", "num"), ("masks", "keypoints")),
    "indices": (("selected_indices", "boxes", "scores"), ()),
    "boxes-scores-labels": (("boxes", "scores"), ("labels", "batch_index", "masks", "keypoints")),
}
LAYOUT_ALIASES = {"torchvision": "boxes-scores-labels", "gluoncv": "boxes-scores-labels",
                  "combined-nms": "boxes-scores-classes", "padded": "boxes-scores-classes", "onnx-nms": "indices"}
ROLE_ALIASES = {"classes": "labels", "ids": "labels", "class_ids": "labels", "num_detections": "num",
                "valid_detections": "num", "bboxes": "boxes", "rows": "detections", "selected": "selected_indices",
                "batch": "batch_index"}
ROLES = ("detections", "boxes", "scores", "labels", "num", "batch_index", "selected_indices", "masks", "keypoints")
BOX_FORMATS = ("xyxy", "yxyx", "xywh", "cxcywh")
_SPEC_KEYS = ("layout", "name", "box_format")
# layouts whose image count is implied by the largest batch index (an empty last image is invisible)
_IMPLICIT_IMAGES = ("yolo",)


def canonical_layout(layout: str) -> str:
    name = LAYOUT_ALIASES.get(layout.strip().lower(), layout.strip().lower())
    if name not in LAYOUTS:
        raise UsageError(f"unknown detection layout '{layout}'; choose one of "
                         f"{', '.join([*LAYOUTS, *LAYOUT_ALIASES])}")
    return name


@dataclass(frozen=True)
class DetectionSpec:
    """One group of detector outputs: the candidate's layout and role -> output name, and the reference's.

    ``reference_layout`` / ``reference_outputs`` / ``reference_box_format`` default to the candidate's
    (a source framework run names its outputs as the export does). ``name`` labels the group in
    reports (default: the detections or boxes output). ``nms_iou``: the IoU threshold of the NMS that
    selects the group's rows, read from the graph at validation time (``with_nms_thresholds``), never from
    metadata (not serialised): the tie rules need it as evidence; ``score_threshold`` the score below which
    a candidate never reaches that NMS (the graph's constant compared with its scores; feed coverage).
    """

    layout: str
    outputs: Mapping[str, str]
    reference_layout: str | None = None
    reference_outputs: Mapping[str, str] | None = None
    name: str | None = None
    box_format: str = "xyxy"
    reference_box_format: str | None = None
    nms_iou: float | None = None
    score_threshold: float | None = None
    # why the group fails whatever its rows (``with_source_nms``): the candidate's NMS IoU threshold is not the
    # one the source states (not serialised: it is decided at validation time from the source)
    nms_disagreement: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", canonical_layout(self.layout))
        object.__setattr__(self, "outputs", _roles(self.outputs))
        if self.reference_layout is not None:
            object.__setattr__(self, "reference_layout", canonical_layout(self.reference_layout))
        if self.reference_outputs is not None:
            object.__setattr__(self, "reference_outputs", _roles(self.reference_outputs))
        _check_roles(self.layout, self.outputs, "")
        _check_roles(self.ref_layout, self.ref_outputs, "reference ")
        for fmt in (self.box_format, self.ref_box_format):
            if fmt not in BOX_FORMATS:
                raise UsageError(f"box_format '{fmt}': choose one of {', '.join(BOX_FORMATS)}")

    # -- the two sides -------------------------------------------------------------------------------
    @property
    def ref_layout(self) -> str:
        return self.reference_layout or self.layout

    @property
    def ref_outputs(self) -> Mapping[str, str]:
        return self.reference_outputs if self.reference_outputs is not None else self.outputs

    @property
    def ref_box_format(self) -> str:
        return self.reference_box_format or self.box_format

    @property
    def label(self) -> str:
        """The group's name in reports."""
        return self.name or self.outputs.get("detections") or self.outputs.get("boxes") or next(iter(self.outputs.values()))

    def candidate_names(self) -> list[str]:
        return list(self.outputs.values())

    def reference_names(self) -> list[str]:
        return list(self.ref_outputs.values())

    def read(self, outputs: Mapping[str, np.ndarray], side: str = "candidate") -> list[Detections]:
        """The per-image detections of one run's outputs (``side``: "candidate" or "reference").

        Raises KeyError for a missing output and ValueError for arrays that do not fit the layout.
        """
        reference = side == "reference"
        layout = self.ref_layout if reference else self.layout
        roles = self.ref_outputs if reference else self.outputs
        box_format = self.ref_box_format if reference else self.box_format
        arrays = {role: np.asarray(outputs[name]) for role, name in roles.items()}
        try:
            dets = _READERS[layout](arrays)
            if "masks" in arrays:
                dets = _with_masks(dets, arrays["masks"], arrays["boxes"].ndim == 3)
            if "keypoints" in arrays:
                dets = _with_keypoints(dets, arrays["keypoints"], arrays["boxes"].ndim == 3)
        except (IndexError, ValueError, TypeError) as exc:
            shapes = ", ".join(f"{role} {list(a.shape)}" for role, a in arrays.items())
            raise ValueError(f"{side} outputs do not fit the {layout} layout ({shapes}): {exc}") from None
        return [_to_xyxy(d, box_format) for d in dets]

    def implicit_images(self, side: str = "candidate") -> bool:
        """Whether this side's image count is only implied by batch indices (empty last images vanish)."""
        layout, roles = (self.ref_layout, self.ref_outputs) if side == "reference" else (self.layout, self.outputs)
        return layout in _IMPLICIT_IMAGES or (layout == "boxes-scores-labels" and "batch_index" in roles)

    # -- serialisation -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"layout": self.layout, "outputs": dict(self.outputs)}
        if self.name:
            data["name"] = self.name
        if self.box_format != "xyxy":
            data["box_format"] = self.box_format
        if self.reference_layout or self.reference_outputs is not None or self.reference_box_format:
            data["reference"] = {"layout": self.ref_layout, "outputs": dict(self.ref_outputs)}
            if self.reference_box_format:
                data["reference"]["box_format"] = self.reference_box_format
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DetectionSpec:
        try:
            ref = data.get("reference") or {}
            return cls(layout=data["layout"], outputs=dict(data["outputs"]), name=data.get("name"),
                       box_format=data.get("box_format", "xyxy"), reference_layout=ref.get("layout"),
                       reference_outputs=dict(ref["outputs"]) if "outputs" in ref else None,
                       reference_box_format=ref.get("box_format"))
        except (KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"detection spec {data!r} is malformed: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> DetectionSpec:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_legacy(cls, name: str, output_format: str) -> DetectionSpec:
        """A lowered MultiBoxDetection output: reference ``name`` in MXNet's layout, candidate in ``output_format``."""
        from bridge.passes.contrib.nms import OUTPUT_FORMATS

        if output_format not in OUTPUT_FORMATS:
            raise UsageError(f"detection output '{name}': unknown format '{output_format}'")
        names = detection_output_names(name, output_format)
        roles = {"mxnet": ("detections",), "boxes-scores-classes": ("boxes", "scores", "labels", "num"),
                 "indices": ("selected_indices", "boxes", "scores")}[output_format]
        return cls(layout=output_format, outputs=dict(zip(roles, names, strict=True)), reference_layout="mxnet",
                   reference_outputs={"detections": name}, name=name)

    @classmethod
    def parse(cls, text: str) -> DetectionSpec:
        """Parse ``boxes=NAME,scores=NAME,labels=NAME[,batch_index=NAME][,num=NAME]`` (module docstring)."""
        where = f"--detections '{text}'"
        roles: dict[str, str] = {}
        meta: dict[str, str] = {}
        for item in [p.strip() for p in text.split(",")]:
            key, sep, value = item.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not sep or not key or not value:
                raise UsageError(f"{where}: expected ROLE=OUTPUT items separated by commas, e.g. "
                                 "boxes=boxes,scores=scores,labels=labels (got '{item}')".replace("{item}", item))
            if key in _SPEC_KEYS:
                target = meta
            else:
                key = ROLE_ALIASES.get(key, key)
                if key not in ROLES:
                    raise UsageError(f"{where}: unknown role '{key}'; roles are {', '.join(ROLES)} "
                                     f"(and {', '.join(_SPEC_KEYS)})")
                target = roles
            if key in target:
                raise UsageError(f"{where}: '{key}' is given twice")
            target[key] = value
        if not roles:
            raise UsageError(f"{where}: name at least the boxes and scores outputs")
        layout = meta.get("layout") or _layout_from_roles(roles, where)
        try:
            return cls(layout=layout, outputs=roles, name=meta.get("name"), box_format=meta.get("box_format", "xyxy"))
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None


def _roles(outputs: Mapping[str, str]) -> dict[str, str]:
    return {ROLE_ALIASES.get(role, role): str(name) for role, name in dict(outputs).items()}


def _check_roles(layout: str, roles: Mapping[str, str], side: str) -> None:
    required, optional = LAYOUTS[layout]
    missing = [r for r in required if r not in roles]
    extra = [r for r in roles if r not in required and r not in optional]
    if missing or extra:
        parts = ([f"needs {', '.join(missing)}"] if missing else []) + ([f"has no role {', '.join(extra)}"] if extra else [])
        raise UsageError(f"{side}layout {layout} {' and '.join(parts)} (roles: {', '.join(required)}"
                         + (f"; optional {', '.join(optional)}" if optional else "") + ")")
    names = list(roles.values())
    if len(names) != len(set(names)):
        raise UsageError(f"{side}layout {layout}: one output plays two roles ({names})")


def _layout_from_roles(roles: Mapping[str, str], where: str) -> str:
    if "detections" in roles:
        raise UsageError(f"{where}: say which rows layout detections={roles['detections']} is in: "
                         "layout=mxnet ([B, N, 6] class, score, x1, y1, x2, y2) or layout=yolo "
                         "([N, 7] batch_index, x1, y1, x2, y2, score, class)")
    if "selected_indices" in roles:
        return "indices"
    if "num" in roles:
        return "boxes-scores-classes"
    return "boxes-scores-labels"


# -- readers -----------------------------------------------------------------------------------------

def _read_mxnet(a: Mapping[str, np.ndarray]) -> list[Detections]:
    rows = a["detections"]
    if rows.shape[-1] != 6:
        raise ValueError("rows must have 6 columns")
    return from_mxnet(rows)


def _read_yolo(a: Mapping[str, np.ndarray]) -> list[Detections]:
    rows = a["detections"]
    if rows.shape[-1] != 7:
        raise ValueError("rows must have 7 columns")
    rows = rows.reshape(-1, 7).astype(np.float64)
    batch = rows[:, 0]
    images = int(np.nanmax(batch)) + 1 if len(rows) and np.isfinite(batch).any() else 0
    return [_subset(rows[:, 1:5], rows[:, 5], rows[:, 6], np.flatnonzero(batch == image)) for image in range(max(images, 0))]


def _read_padded(a: Mapping[str, np.ndarray]) -> list[Detections]:
    boxes = a["boxes"]
    if boxes.ndim == 2:  # one image without its batch axis
        return from_padded(boxes[None], a["scores"].reshape(1, -1), a["labels"].reshape(1, -1), a["num"].reshape(1))
    b = len(boxes)
    return from_padded(boxes, a["scores"].reshape(b, -1), a["labels"].reshape(b, -1), a["num"].reshape(b))


def _read_indices(a: Mapping[str, np.ndarray]) -> list[Detections]:
    return from_indices(a["selected_indices"], a["boxes"], a["scores"])


def _read_boxes_scores_labels(a: Mapping[str, np.ndarray]) -> list[Detections]:
    boxes = a["boxes"]
    if boxes.shape[-1] != 4:
        raise ValueError("boxes must end in 4 coordinates")
    if boxes.ndim == 3 and "batch_index" not in a:  # GluonCV: [B, N, 4], padding rows have label < 0
        b, n = boxes.shape[:2]
        scores = a["scores"].reshape(b, n)
        labels = a["labels"].reshape(b, n) if "labels" in a else np.zeros((b, n))
        keep_key = labels if "labels" in a else scores
        return [_subset(boxes[i], scores[i], labels[i], np.flatnonzero(~(keep_key[i] < 0))) for i in range(b)]
    boxes = boxes.reshape(-1, 4)
    k = len(boxes)
    scores = a["scores"].reshape(k)
    labels = a["labels"].reshape(k) if "labels" in a else np.zeros(k)
    if "batch_index" not in a:
        return [_subset(boxes, scores, labels, np.arange(k))]
    batch = a["batch_index"].reshape(k).astype(np.int64)
    images = int(batch.max()) + 1 if k else 0
    return [_subset(boxes, scores, labels, np.flatnonzero(batch == image)) for image in range(images)]


def _subset(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray, rows: np.ndarray) -> Detections:
    return Detections(np.asarray(boxes, np.float64).reshape(-1, 4)[rows], np.asarray(scores, np.float64)[rows],
                      as_class_ids(np.asarray(labels)[rows]), rows.astype(np.int64))


_READERS = {"mxnet": _read_mxnet, "yolo": _read_yolo, "boxes-scores-classes": _read_padded,
            "indices": _read_indices, "boxes-scores-labels": _read_boxes_scores_labels}


def _with_masks(dets: list[Detections], masks: np.ndarray, batched: bool) -> list[Detections]:
    """Attach each detection's mask: [B, K, ...] masks for batched boxes, else [K, ...] by output row."""
    return [replace(d, masks=(masks[image] if batched else masks)[d.row_ids()]) for image, d in enumerate(dets)]


def _with_keypoints(dets: list[Detections], keypoints: np.ndarray, batched: bool) -> list[Detections]:
    """Attach each detection's keypoints (x, y pairs, in the boxes' axis order): [B, K, P, 2] for batched boxes,
    else [K, P, 2] by output row."""
    if keypoints.shape[-1] != 2 or keypoints.ndim != (4 if batched else 3):
        raise ValueError(f"keypoints {list(keypoints.shape)}: expected [{'B, ' if batched else ''}K, P, 2]")
    return [replace(d, keypoints=(keypoints[image] if batched else keypoints)[d.row_ids()])
            for image, d in enumerate(dets)]


def _to_xyxy(d: Detections, box_format: str) -> Detections:
    if box_format == "xyxy" or len(d.boxes) == 0:
        return d
    suppressed = None if d.suppressed_boxes is None else _boxes_to_xyxy(d.suppressed_boxes, box_format)
    # keypoints come in the boxes' axis order: (y, x) pairs beside yxyx boxes
    keypoints = d.keypoints[..., ::-1] if d.keypoints is not None and box_format == "yxyx" else d.keypoints
    return replace(d, boxes=_boxes_to_xyxy(d.boxes, box_format), suppressed_boxes=suppressed, keypoints=keypoints)


def _boxes_to_xyxy(b: np.ndarray, box_format: str) -> np.ndarray:
    if box_format == "yxyx":
        return b[:, [1, 0, 3, 2]]
    if box_format == "xywh":
        return np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], axis=1)
    return np.concatenate([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], axis=1)  # cxcywh


def read_detection_pair(spec: DetectionSpec, reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray]
                        ) -> tuple[list[Detections], list[Detections]]:
    """Both sides' detections with equal image counts (a batch-index layout's missing empty images are added)."""
    ref = spec.read(reference, "reference")
    try:
        cand = spec.read(candidate, "candidate")
    except ValueError:
        # the reference fits the layout: a candidate that does not, with outputs shaped otherwise, computes
        # something else (e.g. one mask for 21 boxes); that is not a question of layout
        differ = [f"{role} {list(np.shape(candidate[name]))} vs {list(np.shape(reference[spec.ref_outputs[role]]))}"
                  for role, name in spec.outputs.items() if role in spec.ref_outputs and name in candidate
                  and spec.ref_outputs[role] in reference and spec.ref_layout == spec.layout
                  and np.shape(candidate[name]) != np.shape(reference[spec.ref_outputs[role]])]
        if differ:
            raise ValueError(f"the candidate's outputs are shaped unlike the reference's ({', '.join(differ)}) and do "
                             "not fit together: the converted model computes something else") from None
        raise
    capacity = _padded_capacity(spec, candidate)
    if capacity is not None:
        ref = [best_rows(d, capacity) for d in ref]
    if len(ref) != len(cand):
        short, implicit = (ref, spec.implicit_images("reference")) if len(ref) < len(cand) else \
            (cand, spec.implicit_images("candidate"))
        if not implicit:
            raise ValueError(f"reference has {len(ref)} images, candidate {len(cand)}")
        empty = Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
        short.extend([empty] * abs(len(ref) - len(cand)))
    return ref, cand


def _padded_capacity(spec: DetectionSpec, candidate: Mapping[str, np.ndarray]) -> int | None:
    """K, when the candidate keeps at most K rows per image (the padded boxes-scores-classes layout, e.g.
    ``--max-detections K``) and the reference is not cut the same way; None otherwise."""
    if spec.layout != "boxes-scores-classes" or spec.ref_layout == "boxes-scores-classes":
        return None
    boxes = candidate.get(spec.outputs["boxes"])
    if boxes is None or np.ndim(boxes) < 2:
        return None
    return int(np.shape(boxes)[-2])


def best_rows(d: Detections, k: int) -> Detections:
    """The ``k`` best rows of ``d`` as a top-K output keeps them: score descending, equal scores in row order
    (a stable sort; NaN scores first, as TopK ranks NaN above every number). The rows cut off stay as tie
    evidence (``suppressed_scores`` / ``suppressed_boxes``: candidates this side weighed and did not keep)."""
    if len(d) <= k:
        return d
    key = np.where(np.isnan(d.scores), np.inf, d.scores)
    order = np.argsort(-key, kind="stable")
    kept, dropped = np.sort(order[:k]), order[k:]
    cut = d.take(kept)
    evidence, evidence_boxes = d.scores[dropped], d.boxes[dropped]
    if d.suppressed_scores is not None:
        evidence = np.concatenate([np.asarray(d.suppressed_scores, np.float64), evidence])
        evidence_boxes = (None if d.suppressed_boxes is None
                          else np.concatenate([np.asarray(d.suppressed_boxes, np.float64), evidence_boxes]))
    return replace(cut, suppressed_scores=evidence, suppressed_boxes=evidence_boxes)


# -- serialisation of a model's groups ----------------------------------------------------------------

def dump_detection_specs(specs: Iterable[DetectionSpec]) -> str:
    """The metadata value of ``bridge.detection_outputs``: a JSON list of spec objects."""
    return json.dumps([s.to_dict() for s in specs])


def load_detection_specs(text: str | None) -> list[DetectionSpec]:
    """Read ``bridge.detection_outputs``: the JSON list, one spec object, or the old ``{output: format}`` form."""
    if not text:
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"detection outputs metadata is not JSON: {exc}") from None
    return as_detection_specs(data)


def as_detection_specs(value: Any) -> list[DetectionSpec]:
    """Normalise None, the old ``{output: format}`` mapping, a spec dict, or a sequence of specs / dicts /
    CLI strings to a list of DetectionSpec."""
    if value is None:
        return []
    if isinstance(value, DetectionSpec):
        return [value]
    if isinstance(value, str):
        return [DetectionSpec.parse(value)]
    if isinstance(value, Mapping):
        if "layout" in value and "outputs" in value:
            return [DetectionSpec.from_dict(value)]
        if all(isinstance(v, str) for v in value.values()):
            return [DetectionSpec.from_legacy(str(k), v) for k, v in value.items()]
        raise UsageError(f"detection outputs {value!r}: expected {{output: format}} or a spec object")
    if isinstance(value, Sequence):
        return [s for item in value for s in as_detection_specs(item)]
    raise UsageError(f"detection outputs: cannot read {type(value).__name__}")


# -- finding detector outputs in a graph ------------------------------------------------------------

_NMS_OPS = ("NonMaxSuppression",)
_NAME_HINTS: tuple[tuple[str, str], ...] = (
    ("num", r"num|valid|count"), ("batch_index", r"batch"), ("keypoints", r"keypoint|kpt|landmark"), ("masks", r"mask"),
    ("labels", r"label|class|cls|(^|_)ids?($|_)"), ("scores", r"score|conf|prob"), ("boxes", r"box|bbox"),
)


def detect_detection_outputs(model: onnx.ModelProto) -> list[DetectionSpec]:
    """Detector output groups of ``model``: graph outputs computed from a NonMaxSuppression node.

    Heuristic: outputs downstream of the same NMS node(s) form one group; roles come from output
    names (box, score, label/class, num/valid, batch, mask), else from rank, element type and output
    order. A single [B, N, 6] output is MXNet rows, [N, 7] YOLO rows; NMS's own selected indices as
    an output with its boxes and scores inputs also outputs is the ``indices`` layout. Groups that
    do not make a complete layout are left out (compared elementwise).
    """
    graph = model.graph
    types = _output_types(model)
    outputs = [o.name for o in graph.output]
    nms_nodes = [n for n in _all_nodes(graph) if n.op_type in _NMS_OPS and n.domain in ("", "ai.onnx")]
    if not nms_nodes:
        return []
    specs: list[DetectionSpec] = []
    taken: set[str] = set()
    # ONNX NMS's own output as a graph output, with its boxes and scores also outputs: the indices layout
    aliases = _identity_aliases(graph)
    for node in nms_nodes:
        if len(node.input) < 2:
            continue
        root = [aliases.get(v, v) for v in (node.output[0], node.input[0], node.input[1])]
        sel, boxes, scores = ([o for o in outputs if aliases.get(o, o) == r] for r in root)
        if sel and boxes and scores:
            specs.append(DetectionSpec("indices", {"selected_indices": sel[0], "boxes": boxes[0], "scores": scores[0]}))
            taken.update((sel[0], boxes[0], scores[0]))
    groups: dict[frozenset[int], list[str]] = {}
    for name, sources in _nms_sources(graph, nms_nodes).items():
        if name in outputs and name not in taken:
            groups.setdefault(frozenset(sources), []).append(name)
    for members in groups.values():
        spec = _spec_for_group(sorted(members, key=outputs.index), types)
        if spec is not None:
            specs.append(spec)
    return specs


def with_nms_thresholds(model: onnx.ModelProto, specs: Sequence[DetectionSpec]) -> list[DetectionSpec]:
    """``specs`` each with the IoU threshold of the NMS that selects its candidate outputs (``nms_threshold``)
    and the score threshold in front of it (``score_threshold``)."""
    return [replace(s, nms_iou=nms_threshold(model, s.candidate_names()),
                    score_threshold=score_threshold(model, s.candidate_names())) for s in specs]


_SCORE_CUTS = ("Greater", "GreaterOrEqual", "Less", "LessOrEqual")
LOWEST_SCORE_CUT = -1e30  # NMS run with the lowest float32 as its score threshold: the cut is elsewhere


def score_threshold(model: onnx.ModelProto, outputs: Sequence[str]) -> float | None:
    """The score threshold candidates must pass before the NMS nearest ``outputs``: its score_threshold input
    when that is a real one, else the largest constant a comparison upstream of its scores holds them against
    (a lowered MultiBoxDetection's ``threshold``, box_nms's ``valid_thresh``); None when neither is found."""
    graph = model.graph
    nms_nodes = [n for n in graph.node if n.op_type in _NMS_OPS and n.domain in ("", "ai.onnx")]
    sources = _nms_sources(graph, nms_nodes)
    feeding = sorted(set().union(*(sources.get(o, set()) for o in outputs)))
    if not feeding:
        return None
    nms = nms_nodes[feeding[-1]]
    own = _constant(model, nms, 4)
    if own is not None and own > LOWEST_SCORE_CUT and len(nms.input) > 4 and nms.input[4]:
        return own
    producer = {o: n for n in graph.node for o in n.output if o}
    cuts: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        if n.op_type in _SCORE_CUTS:
            for i in n.input:
                cuts.setdefault(i, []).append(n)
    seen: set[str] = set()
    stack = [nms.input[1]] if len(nms.input) > 1 else []
    found: list[float] = []
    while stack:  # every comparison with a scalar constant upstream of the NMS's scores
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is None:
            continue
        for i in node.input:
            if not i:
                continue
            stack.append(i)
            for consumer in cuts.get(i, ()):
                for position, other in enumerate(consumer.input):
                    if other != i:
                        value = _constant(model, consumer, position)
                        if value is not None and 0 < value < 1:
                            found.append(value)
    return max(found) if found else None


def last_nms_nodes(model: onnx.ModelProto, outputs: Sequence[str]) -> list[onnx.NodeProto]:
    """The NonMaxSuppression nodes nearest ``outputs``: those feeding them that no other NMS feeding them lies
    downstream of (the selection that decided their rows last)."""
    graph = model.graph
    nms_nodes = [n for n in _all_nodes(graph) if n.op_type in _NMS_OPS and n.domain in ("", "ai.onnx")]
    if not nms_nodes:
        return []
    sources = _nms_sources(graph, nms_nodes)
    feeding: set[int] = set().union(*(sources.get(o, set()) for o in outputs))
    upstream: set[int] = set()
    for k in feeding:  # an NMS whose output another NMS of the group reads is not the last selection
        upstream |= sources.get(nms_nodes[k].output[0], set()) - {k}
    return [nms_nodes[k] for k in sorted(feeding - upstream)]


def nms_threshold(model: onnx.ModelProto, outputs: Sequence[str]) -> float | None:
    """The IoU threshold of the NonMaxSuppression nodes nearest ``outputs`` (``last_nms_nodes``): the largest
    when they differ (the stricter evidence for a tie rule), None without an NMS or with a threshold that is not
    a constant. ONNX's default threshold is 0."""
    values = [_constant(model, node, 3) for node in last_nms_nodes(model, outputs)]
    if not values or any(v is None for v in values):
        return None
    return max(float(v) for v in values if v is not None)


SOURCE_NMS_UNSTATED = "NMS IoU threshold read from the candidate: the source does not state it"


def same_nms_threshold(candidate: float, source: float) -> bool:
    """The candidate's IoU threshold is the source's: equal in float32 up to one ulp (a lowering turns MXNet's
    "IoU >= t" into ONNX's "IoU > nextafter(t, 0)", bridge.passes.contrib.detection)."""
    c, s = np.float32(candidate), np.float32(source)
    return bool(abs(float(c) - float(s)) <= float(np.spacing(abs(s))))


def with_source_nms(model: onnx.ModelProto, specs: Sequence[DetectionSpec], stated: Mapping[str, float] | None,
                    ) -> tuple[list[DetectionSpec], list[str]]:
    """``specs`` with the NMS IoU threshold the *source* states (``stated``: source node name -> threshold, from
    the source's adapter; None when the source cannot state it) in place of the one read from the candidate
    (``with_nms_thresholds``), so a candidate whose NMS threshold was changed cannot change its own tie excuse.

    Per group: the source node a nearest NMS of the candidate stands for (its provenance, ``bridge.source.node``)
    picks the source's threshold; when none does (provenance stripped, or a name the source lacks) the largest
    the source states is taken (the stricter evidence), said. A candidate threshold other than the source's
    (beyond one float32 ulp) sets ``nms_disagreement``: the group fails, naming both values. When the source
    states nothing the candidate's value stays, and the returned lines say so (``SOURCE_NMS_UNSTATED``)."""
    from bridge import provenance

    kept: list[DetectionSpec] = []
    said: list[str] = []
    for spec in specs:
        nodes = last_nms_nodes(model, spec.candidate_names())
        if not nodes:  # no NMS of the candidate selects these rows: no threshold to take or to check
            kept.append(spec)
            continue
        if not stated:
            if spec.nms_iou is not None:
                said.append(f"{spec.label}: {SOURCE_NMS_UNSTATED} ({spec.nms_iou:.6g}); its tie excuses rest on the "
                            "file under test's own threshold")
            kept.append(spec)
            continue
        named = []
        for node in nodes:
            prov = provenance.read(node)
            for name in ((prov.node,) if prov is not None and prov.node else ()) + ((node.name,) if node.name else ()):
                if name in stated:
                    named.append((name, stated[name]))
                    break
        if named:
            where, source_iou = max(named, key=lambda item: item[1])
        else:
            where, source_iou = max(stated.items(), key=lambda item: item[1])
            if len(set(stated.values())) > 1:
                said.append(f"{spec.label}: no NMS of the candidate names a source NMS; the tie rules use the "
                            f"largest IoU threshold the source states ({source_iou:.6g}, {where})")
        disagreement = ""
        if spec.nms_iou is None:
            said.append(f"{spec.label}: the candidate's NMS IoU threshold is computed, not a constant: not checked "
                        f"against the source's {source_iou:.6g} ({where})")
        elif not same_nms_threshold(spec.nms_iou, source_iou):
            disagreement = (f"the candidate's NMS IoU threshold {spec.nms_iou:.6g} is not the source's "
                            f"{source_iou:.6g} ({where})")
        kept.append(replace(spec, nms_iou=float(source_iou), nms_disagreement=disagreement))
    return kept, said


def _constant(model: onnx.ModelProto, node: onnx.NodeProto, position: int) -> float | None:
    """The scalar constant at ``node``'s input ``position`` (an initializer or a Constant node anywhere in the
    model), the op's default 0.0 when the input is absent, None when it is computed."""
    if position >= len(node.input) or not node.input[position]:
        return 0.0
    name = node.input[position]
    for graph in [model.graph, *(g for n in _all_nodes(model.graph) for g in _subgraphs(n))]:
        for t in graph.initializer:
            if t.name == name:
                return float(np.asarray(onnx.numpy_helper.to_array(t)).reshape(-1)[0])
        for n in graph.node:
            if n.op_type == "Constant" and name in n.output:
                value = next((a for a in n.attribute if a.name in ("value", "value_float")), None)
                if value is None:
                    return None
                if value.name == "value_float":
                    return float(value.f)
                return float(np.asarray(onnx.numpy_helper.to_array(value.t)).reshape(-1)[0])
    return None


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for sub in _subgraphs(node):
            yield from _all_nodes(sub)


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    subs = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            subs.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            subs.extend(attr.graphs)
    return subs


def _referenced(graph: onnx.GraphProto) -> set[str]:
    """Every value name a (sub)graph reads, its outer-scope captures included."""
    names: set[str] = set()
    for node in graph.node:
        names.update(i for i in node.input if i)
        for sub in _subgraphs(node):
            names |= _referenced(sub)
    return names


def _nms_sources(graph: onnx.GraphProto, nms_nodes: Sequence[onnx.NodeProto]) -> dict[str, set[int]]:
    """value name -> ids of the NMS nodes it is computed from (forward over the topologically sorted graph)."""
    nms_ids = {id(n): k for k, n in enumerate(nms_nodes)}
    sources: dict[str, set[int]] = {}
    for node in graph.node:
        found: set[int] = set()
        if id(node) in nms_ids:
            found.add(nms_ids[id(node)])
        reads = set(node.input)
        for sub in _subgraphs(node):
            reads |= _referenced(sub)
            found |= {nms_ids[id(n)] for n in _all_nodes(sub) if id(n) in nms_ids}
        for name in reads:
            found |= sources.get(name, set())
        if found:
            for out in node.output:
                if out:
                    sources[out] = set(found)
    return sources


def _identity_aliases(graph: onnx.GraphProto) -> dict[str, str]:
    alias: dict[str, str] = {}
    for node in graph.node:
        if node.op_type == "Identity" and node.input and node.output:
            alias[node.output[0]] = alias.get(node.input[0], node.input[0])
    return alias


def _output_types(model: onnx.ModelProto) -> dict[str, tuple[int, list[int | None] | None]]:
    """output name -> (element type, dims or None), after shape inference when it works."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    result = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] if t.HasField("shape") else None
        if vi.name not in result or dims is not None:
            result[vi.name] = (t.elem_type, dims)
    return result


def _spec_for_group(members: list[str], types: Mapping[str, tuple[int, list[int | None] | None]]
                    ) -> DetectionSpec | None:
    def rank(n: str) -> int | None:
        dims = types.get(n, (0, None))[1]
        return None if dims is None else len(dims)

    def last(n: str) -> int | None:
        dims = types.get(n, (0, None))[1]
        return dims[-1] if dims else None

    def is_int(n: str) -> bool:
        elem = types.get(n, (0, None))[0]
        return elem in (onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
                        onnx.TensorProto.INT8, onnx.TensorProto.UINT8)

    if len(members) == 1:
        n = members[0]
        if rank(n) == 3 and last(n) == 6:
            return DetectionSpec("mxnet", {"detections": n})
        if rank(n) == 2 and last(n) == 7:
            return DetectionSpec("yolo", {"detections": n})
    roles: dict[str, str] = {}
    rest = []
    # a prefix every member shares is the model's (Gluon's block name: "maskrcnn0_slice_axis4_output"), not a role
    shared = _shared_prefix(members)
    for n in members:  # names first
        own = n[len(shared):].lower()
        role = next((r for r, pattern in _NAME_HINTS if re.search(pattern, own) and r not in roles), None)
        if role is None:
            rest.append(n)
        else:
            roles[role] = n
    # GluonCV detectors return (ids, scores, boxes[, masks]): two float per-row outputs *before* the boxes are
    # class ids then scores (TF's combined NMS puts scores then classes after the boxes)
    box_at = next((k for k, n in enumerate(rest) if last(n) == 4 and rank(n) in (2, 3) and not is_int(n)), None)
    leading = [n for n in rest[:box_at or 0] if not is_int(n) and rank(n) in (2, 3) and last(n) in (1, None)]
    if "boxes" not in roles and "labels" not in roles and "scores" not in roles and len(leading) == 2:
        roles["labels"], roles["scores"] = leading
        rest = [n for n in rest if n not in leading]
    for n in rest:  # then shapes and element types, in output order
        r = rank(n)
        if "boxes" not in roles and last(n) == 4 and r in (2, 3) and not is_int(n):
            roles["boxes"] = n
        elif r == 4 and last(n) == 2 and "keypoints" not in roles and not is_int(n) and "boxes" in roles:
            roles["keypoints"] = n  # [B, K, P, 2]: (x, y) pairs per detection
        elif r is not None and r >= 3 and "masks" not in roles and last(n) != 4 and not is_int(n) and "boxes" in roles:
            roles["masks"] = n
        elif is_int(n) and "labels" not in roles and r is not None and r >= 1 and not (r == 1 and _batched(roles, rank)):
            roles["labels"] = n
        elif is_int(n) and r == 1 and _batched(roles, rank) and "num" not in roles:
            roles["num"] = n
        elif is_int(n) and r == 1 and "batch_index" not in roles:
            roles["batch_index"] = n
        elif not is_int(n) and "scores" not in roles:
            roles["scores"] = n
        elif not is_int(n) and "labels" not in roles:
            roles["labels"] = n  # TF combined NMS reports classes as floats, after the scores
    if "boxes" not in roles or "scores" not in roles:
        return None
    if "num" in roles:
        if "labels" not in roles:
            return None
        roles.pop("batch_index", None)
        return DetectionSpec("boxes-scores-classes", roles)
    return DetectionSpec("boxes-scores-labels", roles)


def _shared_prefix(names: Sequence[str]) -> str:
    """The longest ``_``-ended prefix all ``names`` share (empty for fewer than two names)."""
    if len(names) < 2:
        return ""
    first = names[0]
    size = next((k for k in range(len(first)) if any(len(n) <= k or n[k] != first[k] for n in names)), len(first))
    common = first[:size]
    return common[:common.rfind("_") + 1]


def _batched(roles: Mapping[str, str], rank: Any) -> bool:
    return "boxes" in roles and rank(roles["boxes"]) == 3


__all__ = [
    "BOX_FORMATS",
    "LAYOUTS",
    "SOURCE_NMS_UNSTATED",
    "DetectionSpec",
    "as_detection_specs",
    "canonical_layout",
    "detect_detection_outputs",
    "dump_detection_specs",
    "last_nms_nodes",
    "load_detection_specs",
    "nms_threshold",
    "read_detection_pair",
    "same_nms_threshold",
    "score_threshold",
    "with_nms_thresholds",
    "with_source_nms",
]
