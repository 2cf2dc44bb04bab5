"""Edits of a detector's reported rows, in ONNX, for every detection layout bridge matches.

A converter bug after the NMS shows up as rows that are wrong: a box moved, a row dropped, class ids off by
one, x and y swapped, scores clipped. These builders splice such an edit after a group's graph outputs
(``bridge.validation.detection.layouts``: ``mxnet`` [B, N, 6], ``yolo`` [K, 7], ``boxes-scores-labels``
batched (GluonCV) or per image (torchvision), ``boxes-scores-classes`` padded with ``num``), so the edited
model keeps its output names and validation reads it like the original.

Row edits pick their row by rank inside each image: the best-scored valid row ("top"), the median one
("middle") or the worst-scored one ("lowest"). Ranking is done in the graph (ArgMax / ArgMin / TopK over the
scores of valid rows, a padding column keeps empty images valid), so the edit follows the data of every input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mutation_graph import Editor, value_shapes
from onnx import TensorProto, helper

from bridge.validation.detection.layouts import DetectionSpec

RANKS = ("top", "middle", "lowest")
MOVE = 0.2  # a moved box is shifted along x by this share of its width: IoU 0.67 with where it was
INF = np.float32(np.inf)


class NoRows(Exception):
    """The group's layout has no such edit (e.g. class ids of a group without labels)."""


def _i64(*values: int) -> np.ndarray:
    return np.asarray(values, np.int64)


@dataclass
class _Boxes:
    """Which box columns hold x (for a move), how to swap x and y, how to read a box's width."""

    x_cols: tuple[int, ...]
    swap: tuple[int, ...]
    width: tuple[int, int] | int  # (x2 col, x1 col) for corners, else the width column


def _box_format(fmt: str) -> _Boxes:
    return {"xyxy": _Boxes((0, 2), (1, 0, 3, 2), (2, 0)), "yxyx": _Boxes((1, 3), (1, 0, 3, 2), (3, 1)),
            "xywh": _Boxes((0,), (1, 0, 3, 2), 2), "cxcywh": _Boxes((0,), (1, 0, 3, 2), 2)}[fmt]


class Rows:
    """One detection group of a model under edit: its layout's scores, valid rows and edits."""

    def __init__(self, ed: Editor, spec: DetectionSpec) -> None:
        self.ed, self.spec = ed, spec
        self.layout = spec.layout
        self.roles = dict(spec.outputs)
        self.boxes_fmt = _box_format(spec.box_format)
        if self.layout == "indices":
            raise NoRows("the indices layout (NonMaxSuppression's own output) has no rows to edit")
        shapes = value_shapes(ed.model)
        self.ranks = {role: len(shapes[name]) if name in shapes else None for role, name in self.roles.items()}
        # every output of the group is read as it was (``self.src``) and written as edited (``self.out``) by
        # ``close``: masks computed from the originals cannot loop back through an edit
        self.src = {role: ed.intercept(name, readers_keep_original=True) for role, name in self.roles.items()}
        self.out = dict(self.src)

    def close(self) -> None:
        """Write the group's outputs (edited or as they were) under their names."""
        for role, name in self.roles.items():
            self.ed.graph.node.append(helper.make_node("Identity", [self.out[role]], [name],
                                                       name=self.ed.fresh("Identity")))

    # -- graph helpers ------------------------------------------------------------------------------------
    def _col(self, value: str, col: int, axis: int) -> str:
        """``value[..., col]`` along ``axis`` (rank reduced)."""
        return self.ed.op("Gather", value, self.ed.const(np.asarray(col, np.int64), "col"), axis=axis)

    def _dim(self, value: str, axis: int) -> str:
        """The size of ``value``'s ``axis`` as an int64 scalar."""
        shape = self.ed.op("Shape", value)
        return self.ed.op("Gather", shape, self.ed.const(np.asarray(axis, np.int64), "axis"), axis=0)

    def _range(self, value: str, axis: int) -> str:
        return self.ed.op("Range", self.ed.const(np.asarray(0, np.int64)), self._dim(value, axis),
                          self.ed.const(np.asarray(1, np.int64)))

    def _unsqueeze(self, value: str, *axes: int) -> str:
        return self.ed.op("Unsqueeze", value, self.ed.const(_i64(*axes), "axes"))

    def _float(self, value: str) -> str:
        return self.ed.op("Cast", value, to=TensorProto.FLOAT)

    # -- the group's rows as [G, K] (G images, K rows) -----------------------------------------------------
    def _grouped(self, batch: str, score: str) -> tuple[str, str]:
        """Rows of a flat list grouped by a float/int batch-index column: (key [G, K], valid [G, K])."""
        b = self.ed.op("Cast", batch, to=TensorProto.INT64)
        padded = self.ed.op("Concat", b, self.ed.const(_i64(-1)), axis=0)  # never empty
        images = self.ed.op("Add", self.ed.op("ReduceMax", padded, keepdims=0), self.ed.const(np.asarray(1, np.int64)))
        ids = self.ed.op("Range", self.ed.const(np.asarray(0, np.int64)), images, self.ed.const(np.asarray(1, np.int64)))
        valid = self.ed.op("Equal", self._unsqueeze(b, 0), self._unsqueeze(ids, 1))
        return self._unsqueeze(score, 0), valid

    def _key_valid(self) -> tuple[str, str]:
        """(scores [G, K], valid [G, K]) of the group."""
        r = self.src
        if self.layout == "mxnet":
            rows = r["detections"]
            return self._col(rows, 1, 2), self.ed.op("GreaterOrEqual", self._col(rows, 0, 2),
                                                     self.ed.const(np.float32(0)))
        if self.layout == "yolo":
            rows = r["detections"]
            key, valid = self._grouped(self._col(rows, 0, 1), self._col(rows, 5, 1))
            return key, self.ed.op("And", valid, self._unsqueeze(
                self.ed.op("GreaterOrEqual", self._col(rows, 0, 1), self.ed.const(np.float32(0))), 0))
        if self.layout == "boxes-scores-classes":
            scores = r["scores"]
            valid = self.ed.op("Less", self._unsqueeze(self._range(scores, 1), 0),
                               self._unsqueeze(self.ed.op("Cast", r["num"], to=TensorProto.INT64), 1))
            return scores, valid
        # boxes-scores-labels: GluonCV batched (boxes [B, N, 4]) or per image (boxes [K, 4])
        if self.batched:
            shape = self.ed.op("Slice", self.ed.op("Shape", r["boxes"]), self.ed.const(_i64(0)), self.ed.const(_i64(2)))
            key = self.ed.op("Reshape", r["scores"], shape)
            if "labels" in r:
                labels = self.ed.op("Reshape", self._float(r["labels"]), shape)
                return key, self.ed.op("GreaterOrEqual", labels, self.ed.const(np.float32(0)))
            return key, self.ed.op("GreaterOrEqual", key, self.ed.const(np.float32(-np.inf)))
        if "batch_index" in r:
            return self._grouped(r["batch_index"], r["scores"])
        key = self._unsqueeze(r["scores"], 0)
        return key, self.ed.op("GreaterOrEqual", key, self.ed.const(np.float32(-np.inf)))

    @property
    def batched(self) -> bool:
        """boxes-scores-labels in GluonCV's batched form (boxes [B, N, 4], label < 0 = padding)."""
        return self.layout == "boxes-scores-labels" and self.ranks.get("boxes") == 3

    def _ranked(self, rank: str) -> str:
        """A bool mask [G, K]: the row of that rank among each image's valid rows (none in an empty image)."""
        key, valid = self._key_valid()
        worst = -INF if rank != "lowest" else INF
        masked = self.ed.op("Where", valid, key, self.ed.const(worst))
        padded = self.ed.op("Pad", masked, self.ed.const(_i64(0, 0, 0, 1), "pads"), self.ed.const(worst))
        if rank == "top":
            idx = self.ed.op("ArgMax", padded, axis=1, keepdims=1)
        elif rank == "lowest":
            idx = self.ed.op("ArgMin", padded, axis=1, keepdims=1)
        else:
            count = self.ed.op("ReduceSum", self.ed.op("Cast", valid, to=TensorProto.INT64), self.ed.const(_i64(1)),
                               keepdims=1)
            middle = self.ed.op("Div", count, self.ed.const(_i64(2)))
            width = self.ed.op("Slice", self.ed.op("Shape", padded), self.ed.const(_i64(1)), self.ed.const(_i64(2)))
            order = self.ed.node("TopK", [padded, width], 2, axis=1)[1]
            idx = self.ed.op("GatherElements", order, middle, axis=1)
        rows = self._unsqueeze(self._range(key, 1), 0)
        return self.ed.op("And", self.ed.op("Equal", rows, idx), valid)

    def _row_mask(self, mask2d: str) -> str:
        """The [G, K] mask as the layout's row mask: [B, N] for batched layouts, [K] for flat lists."""
        if self.layout in ("mxnet", "boxes-scores-classes") or self.batched:
            return mask2d
        any_image = self.ed.reduce_max(self.ed.op("Cast", mask2d, to=TensorProto.INT32), [0], keepdims=0)
        return self.ed.op("Cast", any_image, to=TensorProto.BOOL)

    # -- the edits -------------------------------------------------------------------------------------------
    def _shift(self, boxes: str, mask: str, box_axis_cols: int, offset: int) -> str:
        """``boxes`` with the masked rows moved along x by MOVE x their width (box columns start at ``offset`` of
        a last axis of ``box_axis_cols`` columns)."""
        fmt = self.boxes_fmt
        last = -1
        if isinstance(fmt.width, tuple):
            width = self.ed.op("Sub", self._col(boxes, offset + fmt.width[0], last),
                               self._col(boxes, offset + fmt.width[1], last))
        else:
            width = self._col(boxes, offset + fmt.width, last)
        vec = np.zeros(box_axis_cols, np.float32)
        for c in fmt.x_cols:
            vec[offset + c] = MOVE
        step = self.ed.op("Mul", self._unsqueeze(self.ed.op("Mul", width, self._float(mask)), -1), self.ed.const(vec))
        return self.ed.op("Add", boxes, step)

    def move(self, rank: str) -> None:
        src, out = self.src, self.out
        mask = self._row_mask(self._ranked(rank))
        if self.layout in ("mxnet", "yolo"):
            cols, offset = (6, 2) if self.layout == "mxnet" else (7, 1)
            out["detections"] = self._shift(src["detections"], mask, cols, offset)
        else:
            out["boxes"] = self._shift(src["boxes"], mask, 4, 0)

    def drop(self, rank: str) -> None:
        src, out = self.src, self.out
        mask = self._row_mask(self._ranked(rank))
        keep = self.ed.op("Not", mask)
        if self.layout == "mxnet":  # class -1: MXNet's invalid row
            col0 = self.ed.const(np.asarray([True, False, False, False, False, False]))
            where = self.ed.op("And", self._unsqueeze(mask, -1), col0)
            out["detections"] = self.ed.op("Where", where, self.ed.const(np.float32(-1)), src["detections"])
        elif self.layout == "yolo":
            out["detections"] = self.ed.op("Compress", src["detections"], keep, axis=0)
        elif self.layout == "boxes-scores-classes":
            self._drop_padded(mask)
        elif self.batched:
            if "labels" not in src:
                raise NoRows("a batched group without labels has no padding marker to drop a row with")
            labels = src["labels"]
            out["labels"] = self.ed.op("Where", self.ed.op("Reshape", mask, self.ed.op("Shape", labels)),
                                       self.ed.op("CastLike", self.ed.const(np.float32(-1)), labels), labels)
        else:
            for role in ("boxes", "scores", "labels", "batch_index", "masks"):
                if role in src:
                    out[role] = self.ed.op("Compress", src[role], keep, axis=0)

    def _drop_padded(self, mask: str) -> None:
        """boxes-scores-classes: the dropped row moves behind the valid ones (a stable permutation) and num
        shrinks by one, so a reader of the first num rows no longer sees it."""
        src, out = self.src, self.out
        k = self._dim(src["scores"], 1)
        key = self.ed.op("Add", self._unsqueeze(self._range(src["scores"], 1), 0),
                         self.ed.op("Mul", self.ed.op("Cast", mask, to=TensorProto.INT64), k))
        perm = self.ed.node("TopK", [key, self._unsqueeze(k, 0)], 2, axis=1, largest=0)[1]
        out["scores"] = self.ed.op("GatherElements", src["scores"], perm, axis=1)
        out["labels"] = self.ed.op("GatherElements", src["labels"], perm, axis=1)
        out["boxes"] = self.ed.op("GatherElements", src["boxes"], self.ed.op(
            "Expand", self._unsqueeze(perm, -1), self.ed.op("Shape", src["boxes"])), axis=1)
        dropped = self.ed.reduce_max(self.ed.op("Cast", mask, to=TensorProto.INT64), [1], keepdims=0)
        out["num"] = self.ed.op("Sub", src["num"], self.ed.op("CastLike", dropped, src["num"]))

    def swap_xy(self) -> None:
        src, out = self.src, self.out
        swap = self.boxes_fmt.swap
        if self.layout in ("mxnet", "yolo"):
            offset, cols, axis = (2, 6, 2) if self.layout == "mxnet" else (1, 7, 1)
            perm = list(range(cols))
            for k, c in enumerate(swap):
                perm[offset + k] = offset + c
            out["detections"] = self.ed.op("Gather", src["detections"], self.ed.const(np.asarray(perm, np.int64)),
                                           axis=axis)
        else:
            out["boxes"] = self.ed.op("Gather", src["boxes"], self.ed.const(np.asarray(swap, np.int64)), axis=-1)

    def labels_plus_one(self) -> None:
        src, out = self.src, self.out
        if self.layout in ("mxnet", "yolo"):
            col, cols, axis = (0, 6, 2) if self.layout == "mxnet" else (6, 7, 1)
            rows = src["detections"]
            valid = self.ed.op("GreaterOrEqual", self._col(rows, 0, axis), self.ed.const(np.float32(0)))
            onehot = np.zeros(cols, np.float32)
            onehot[col] = 1
            out["detections"] = self.ed.op("Add", rows, self.ed.op(
                "Mul", self._unsqueeze(self._float(valid), -1), self.ed.const(onehot)))
            return
        if "labels" not in src:
            raise NoRows("the group has no labels output")
        labels = src["labels"]
        if self.layout == "boxes-scores-classes" or self.batched:
            _, valid = self._key_valid()
            out["labels"] = self.ed.op("Add", labels, self.ed.op(
                "CastLike", self.ed.op("Reshape", valid, self.ed.op("Shape", labels)), labels))
            return
        out["labels"] = self.ed.op("Add", labels, self.ed.op("CastLike", self.ed.const(np.int64(1)), labels))

    def clip_scores(self, top: float) -> None:
        src, out = self.src, self.out
        if self.layout in ("mxnet", "yolo"):
            col, cols = (1, 6) if self.layout == "mxnet" else (5, 7)
            select = np.zeros(cols, bool)
            select[col] = True
            rows = src["detections"]
            out["detections"] = self.ed.op("Where", self.ed.const(select),
                                           self.ed.op("Min", rows, self.ed.const(np.float32(top))), rows)
            return
        out["scores"] = self.ed.op("Min", src["scores"], self.ed.op("CastLike", self.ed.const(np.float32(top)),
                                                                    src["scores"]))
