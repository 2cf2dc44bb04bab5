"""Does an anchor set fit a detector's box regressors? Anchors (per layer and in total) against the row count of
the tensor(s) that hold the box values, said the same way wherever it is asked.

A decode pairs anchor row i with regressor row i, so the counts must be equal; an anchor set that does not fit
(a layer too many, a stride wrong, two anchors per cell instead of six) otherwise fails only inside the runtime,
as a broadcast error. Three places ask:

- ``bridge inspect --anchors ...`` (``inspect_anchors``): the anchors a spec generates - count per layer, total,
  the first rows of each layer - and, given a model, the row counts of its regressors (``--boxes``, else every
  rank-3 output [B, N, >= 4]) and whether they match, so a user checks the spec before grafting;
- ``graft-nms``'s plan (``check_fit``): a static row count that differs is a usage error before anything is built;
- ``graft-nms``'s detection check (``check_seen_rows``): a symbolic row count is checked against the rows the model
  gives on the check's first run, with the same message.

Row counts come from the declared shapes (graph inputs, outputs, value_info, initializers), completed by ONNX
shape inference where a tensor has none (``tensor_shapes``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.errors import UsageError
from bridge.graft.anchor_spec import BOX_FORMATS, AnchorSource, resolve_anchors
from bridge.io import load_model
from bridge.passes.contrib.anchor_generators import AnchorSet

log = logging.getLogger(__name__)

Shape = list[int | str | None]
FIRST_ROWS = 3  # anchors shown per layer


def tensor_shapes(proto: onnx.ModelProto, *, infer: bool = False) -> dict[str, Shape | None]:
    """Every tensor name of the graph with its shape where declared (None: unknown) - graph inputs, outputs,
    initializers, value_info, and node outputs without declared shapes. ``infer``: complete the unknown ones by
    ONNX shape inference (with data propagation: shapes computed by Shape / Reshape), where it succeeds."""
    g = proto.graph
    shapes: dict[str, Shape | None] = {}
    for node in g.node:
        for out in node.output:
            if out:
                shapes.setdefault(out, None)
    for t in g.initializer:
        shapes[t.name] = list(t.dims)
    for vi in (*g.input, *g.value_info, *g.output):
        shapes[vi.name] = _shape(vi) if vi.type.tensor_type.HasField("shape") else shapes.get(vi.name)
    if infer and any(s is None for s in shapes.values()):
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError) as exc:
            log.debug("shape inference failed (%s); row counts stay as declared", exc)
        else:
            for vi in inferred.graph.value_info:
                if shapes.get(vi.name, ...) is None and vi.type.tensor_type.HasField("shape"):
                    shapes[vi.name] = _shape(vi)
    return shapes


def _shape(vi: onnx.ValueInfoProto) -> Shape:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in vi.type.tensor_type.shape.dim]


def rows_of(shape: Shape | None) -> int | str | None:
    """N of a [B, N, K] tensor: an int when static, its label when symbolic, None when unknown."""
    if shape is None or len(shape) != 3:
        return None
    d = shape[1]
    return d if (isinstance(d, int) and d > 0) or isinstance(d, str) else None


def anchor_count(source: AnchorSource, shapes: Mapping[str, Shape | None]) -> tuple[int | None, str]:
    """How many anchors ``source`` holds and how to say it (a generated set: per layer), None when a model
    tensor's shape is not static."""
    if source.anchors is not None:
        return source.anchors.count, source.anchors.describe()
    shape = shapes.get(str(source.tensor))
    if shape is None or not all(isinstance(d, int) and d > 0 for d in shape):
        return None, f"tensor '{source.tensor}'"
    size = int(np.prod([int(d) for d in shape if isinstance(d, int)])) if shape else 1
    return size // 4, f"{size // 4} anchors (tensor '{source.tensor}' {shape})"


def misfit_message(anchors: str, described: str, boxes: str, rows: int) -> str:
    """The one message for anchors whose count is not the box row count (``described``: the count, per layer)."""
    return (f"--anchors {anchors}: {described}, but --boxes '{boxes}' has {rows} rows: the anchor set "
            "does not fit this head (check the generator's layers against the model's feature maps)")


def check_fit(anchors: str, source: AnchorSource, shapes: Mapping[str, Shape | None], boxes: str,
              rows: int | str | None) -> None:
    """UsageError (``misfit_message``) when a static row count differs from the anchor count."""
    count, described = anchor_count(source, shapes)
    if isinstance(rows, int) and count is not None and rows != count:
        raise UsageError(misfit_message(anchors, described, boxes, rows))


def check_seen_rows(anchors: str, source: AnchorSource, seen: Mapping[str, np.ndarray], boxes: str) -> None:
    """The same check on the arrays a run gave: ``seen`` holds ``boxes`` [B, N, K] (and a tensor's anchors)."""
    shapes: dict[str, Shape | None] = {name: list(np.shape(value)) for name, value in seen.items()}
    check_fit(anchors, source, shapes, boxes, rows_of(shapes.get(boxes)))


@dataclass(frozen=True)
class RegressorFit:
    """One tensor of box values and whether its rows fit the anchors: ``matches`` None when they are symbolic."""

    name: str
    shape: Shape | None
    rows: int | str | None
    matches: bool | None

    def describe(self) -> str:
        shape = "?" if self.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"
        if self.matches is None:
            rows = "rows unknown" if self.rows is None else f"{self.rows} rows (symbolic: checked when graft-nms runs it)"
            return f"'{self.name}' {shape}: {rows}"
        return f"'{self.name}' {shape}: {self.rows} rows - {'match' if self.matches else 'MISMATCH'}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": self.shape, "rows": self.rows, "matches": self.matches}


@dataclass(frozen=True)
class AnchorReport:
    """What ``--anchors`` generates and, given a model, how it fits the model's regressors."""

    anchors: str  # as the user gave them
    origin: str
    anchor_set: AnchorSet
    model: Path | None = None
    regressors: tuple[RegressorFit, ...] = ()
    boxes_given: bool = False  # --boxes named the tensor (else: every rank-3 output [B, N, >= 4])
    layers_match: bool = False  # the regressors, in output order, hold the anchors of one layer each

    @property
    def matches(self) -> bool | None:
        """True: a regressor (or the regressors layer by layer) fits; False: none can; None: no model, or the
        rows that could fit are symbolic."""
        if self.model is None:
            return None
        if self.layers_match or any(r.matches for r in self.regressors):
            return True
        if any(r.matches is None for r in self.regressors):
            return None
        return False

    def layer_rows(self) -> list[tuple[str, int, np.ndarray]]:
        """(label, count, first rows) per layer, in row order."""
        out = []
        start = 0
        layers = self.anchor_set.layers or (("all", self.anchor_set.count),)
        for label, count in layers:
            out.append((label, count, self.anchor_set.boxes[start:start + min(count, FIRST_ROWS)]))
            start += count
        return out

    def describe(self) -> list[str]:
        """The lines ``bridge inspect --anchors`` prints."""
        lines = [f"anchors: {self.origin}: {self.anchor_set.describe()}"]
        strides = self.anchor_set.strides
        start = 0
        for label, count, first in self.layer_rows():
            lines.append(f"  {label}: {count} anchors, first {len(first)} (cx, cy, w, h"
                         f"{', stride x, y' if strides is not None else ''}):")
            for i, row in enumerate(first):
                values = [*row.tolist(), *(strides[start + i].tolist() if strides is not None else [])]
                lines.append("    " + ", ".join(f"{v:.6g}" for v in values))
            start += count
        if self.model is None:
            return lines
        which = "--boxes" if self.boxes_given else "box-regressor candidates (rank-3 outputs [B, N, >= 4])"
        if not self.regressors:
            lines.append(f"{self.model}: no {which}; name the box values with --boxes")
            return lines
        lines.append(f"{self.model} {which}, against {self.anchor_set.count} anchors:")
        lines += [f"  {r.describe()}" for r in self.regressors]
        if self.layers_match:
            lines.append(f"  the {len(self.regressors)} regressors hold the anchors of one layer each, in order: match")
        verdict = {True: "the anchors fit the model's regressor rows",
                   False: "the anchors do NOT fit: no regressor has their count (check the generator's layers against "
                          "the model's feature maps)",
                   None: "the rows are symbolic: graft-nms checks the count when it first runs the model"}
        lines.append(verdict[self.matches])
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"anchors": self.anchors, "origin": self.origin, "count": self.anchor_set.count,
                "layers": [{"layer": label, "count": count, "first": first.tolist()}
                           for label, count, first in self.layer_rows()],
                "model": None if self.model is None else str(self.model),
                "regressors": [r.to_dict() for r in self.regressors], "layers_match": self.layers_match,
                "matches": self.matches}


def inspect_anchors(anchors: str | Path, anchor_options: Mapping[str, str] | None = None, *,
                    box_format: str | None = None, model: str | Path | None = None,
                    boxes: str | None = None) -> AnchorReport:
    """The anchors ``anchors`` / ``anchor_options`` generate (as ``graft-nms`` resolves them: ``resolve_anchors``)
    and, given ``model``, its regressor rows against them (module docstring)."""
    if box_format is not None and box_format not in BOX_FORMATS:
        raise UsageError(f"--box-format must be one of {', '.join(BOX_FORMATS)} (got '{box_format}')")
    if boxes is not None and model is None:
        raise UsageError("--boxes names a tensor of the model: give the model too")
    proto = load_model(model) if model is not None else None
    shapes = tensor_shapes(proto, infer=True) if proto is not None else {}
    source: AnchorSource = resolve_anchors(str(anchors), dict(anchor_options or {}), tensors=set(shapes),
                                           box_format=box_format or "xyxy")
    if source.anchors is None:
        raise UsageError(f"--anchors '{anchors}' is a tensor of the model: bridge inspect shows generated or file "
                         "anchors (graft-nms reads a tensor's anchors from the model as it runs)")
    anchor_set = source.anchors
    if proto is None:
        return AnchorReport(str(anchors), source.origin, anchor_set)
    if boxes is not None:
        if boxes not in shapes:
            outputs = ", ".join(o.name for o in proto.graph.output)
            raise UsageError(f"--boxes '{boxes}': the model has no tensor of that name (its outputs: {outputs})")
        names: Sequence[str] = [boxes]
    else:
        names = [o.name for o in proto.graph.output if _box_values(shapes.get(o.name))]
    fits = tuple(_fit(name, shapes.get(name), anchor_set) for name in names)
    counts = [count for _, count in anchor_set.layers]
    layers_match = len(fits) > 1 and len(fits) == len(counts) and [f.rows for f in fits] == counts
    return AnchorReport(str(anchors), source.origin, anchor_set, Path(model) if model is not None else None, fits,
                        boxes is not None, layers_match)


def _box_values(shape: Shape | None) -> bool:
    """A [B, N, K] tensor that may hold box values: K >= 4 or unknown."""
    return shape is not None and len(shape) == 3 and not (isinstance(shape[2], int) and shape[2] < 4)


def _fit(name: str, shape: Shape | None, anchor_set: AnchorSet) -> RegressorFit:
    rows = rows_of(shape)
    return RegressorFit(name, shape, rows, rows == anchor_set.count if isinstance(rows, int) else None)


__all__ = ["AnchorReport", "RegressorFit", "check_fit", "check_seen_rows", "inspect_anchors", "misfit_message",
           "rows_of", "tensor_shapes"]
