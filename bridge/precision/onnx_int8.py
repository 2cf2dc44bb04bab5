"""ONNX -> static int8 ONNX (QDQ) with onnxruntime's quantization tools, the float region kept float.

Steps (``onnxruntime.quantization``): ``quant_pre_process`` (ONNX and symbolic shape inference, then
onnxruntime's basic graph optimisations, e.g. BatchNormalization folded into Conv; when symbolic shape
inference cannot finish - an NMS output has a data-dependent size - it is skipped and the ONNX shape
inference alone is used, with a note; onnxruntime then saves its partial model as ``sym_shape_infer_temp.onnx``
plus a ``<uuid>.data`` in the current directory, so pre-processing runs inside a temporary directory that is
removed afterwards); then ``quantize_static`` in QDQ format with per-channel int8 weights
and uint8 activations, MinMax calibration on the calibration images, and every node of the float region
(``bridge.precision.regions``) plus the nodes the fallback keeps float in ``nodes_to_exclude``.

``reduce_range`` (7-bit weights) follows onnxruntime's own guidance for x86 CPUs: on a CPU without VNNI
dot-product instructions (``avx512_vnni`` / ``avx_vnni`` absent from /proc/cpuinfo) its U8S8 kernels use
VPMADDUBSW, whose 16-bit intermediate sums can saturate with full 8-bit weights; with VNNI full range is
used. The calibration ranges are computed once (``calibration_cache_path``) and reused by every fallback
round, which only excludes more nodes.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bridge.chatter import quiet
from bridge.errors import ExportError
from bridge.precision.calibration import Calibration

logger = logging.getLogger(__name__)


def cpu_has_vnni() -> bool:
    """Whether this CPU has VNNI dot-product instructions (AVX512-VNNI or AVX-VNNI)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "avx512_vnni" in flags or "avx_vnni" in flags


@dataclass
class Prepared:
    """The pre-processed fp32 model the quantizer reads, and what its pre-processing did."""

    path: Path
    notes: list[str] = field(default_factory=list)


def pre_process(model: Path, out: Path) -> Prepared:
    """``quant_pre_process`` of ``model`` into ``out`` (module docstring)."""
    from onnxruntime.quantization import quant_pre_process

    notes: list[str] = []
    model, out = model.resolve(), out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    # onnxruntime's symbolic shape inference dumps its partial model into the cwd when it gives up
    with quiet(["onnxruntime", "root"], "onnxruntime quantization pre-processing"), \
            tempfile.TemporaryDirectory(prefix="quant-pre-", dir=out.parent) as scratch, contextlib.chdir(scratch):
        try:
            quant_pre_process(str(model), str(out))
        except Exception as exc:  # symbolic shape inference gives up on data-dependent shapes
            logger.info("symbolic shape inference failed (%s); pre-processing without it", exc)
            notes.append("onnxruntime's symbolic shape inference could not finish (data-dependent shapes after "
                         "NMS); pre-processed with ONNX shape inference and graph optimisations only")
            try:
                quant_pre_process(str(model), str(out), skip_symbolic_shape=True)
            except Exception as second:
                raise ExportError(f"onnxruntime's quantization pre-processing failed: {second}") from second
    return Prepared(out, notes)


class _Reader:
    """onnxruntime's CalibrationDataReader over prepared calibration batches."""

    def __init__(self, batches: Iterable[dict[str, np.ndarray]]) -> None:
        self._batches: Iterator[dict[str, np.ndarray]] = iter(batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)

    def rewind(self) -> None:  # part of the reader protocol in recent onnxruntime
        pass


def quantize_qdq(prepared: Path, out: Path, calibration: Calibration, exclude: Iterable[str], cache: Path,
                 *, reduce_range: bool | None = None) -> dict[str, Any]:
    """Static int8 QDQ of ``prepared`` into ``out``, ``exclude`` staying float; the calibration ranges are
    read from ``cache`` when it exists, else computed and saved there. Returns what was done."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    reduce = not cpu_has_vnni() if reduce_range is None else reduce_range

    class Reader(_Reader, CalibrationDataReader):
        pass

    start = time.perf_counter()
    excluded = sorted(set(exclude))
    with quiet(["onnxruntime", "root"], "onnxruntime static quantization"), np.errstate(all="ignore"):
        try:
            quantize_static(str(prepared), str(out), Reader(calibration), quant_format=QuantFormat.QDQ,
                            per_channel=True, reduce_range=reduce, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, nodes_to_exclude=excluded,
                            calibration_cache_path=str(cache))
        except Exception as exc:  # the quantizer's own failure, named
            raise ExportError(f"onnxruntime's static quantization failed: {exc}") from exc
    return {"seconds": time.perf_counter() - start, "reduce_range": reduce, "excluded": len(excluded),
            "settings": "QDQ, per-channel int8 weights" + (" (7-bit: reduce_range, no VNNI on this CPU)"
                                                          if reduce else "") + ", uint8 activations, MinMax "
            f"calibration on {calibration.describe()}"}


def prepared_once(fp32: Path, workdir: Path) -> Prepared:
    """``pre_process`` of ``fp32`` into ``workdir`` once; later calls (fallback rounds, the cost measure, other
    targets' builders) reuse it."""
    out = workdir / "fp32.pre.onnx"
    notes = workdir / "fp32.pre.notes"
    if out.exists():
        return Prepared(out, notes.read_text().splitlines() if notes.exists() else [])
    workdir.mkdir(parents=True, exist_ok=True)
    prepared = pre_process(fp32, out)
    notes.write_text("\n".join(prepared.notes))
    return prepared


def int8_qdq(fp32: Path, out: Path, calibration: Calibration, keep_float: Iterable[str], workdir: Path
             ) -> tuple[Prepared, Any, dict[str, Any]]:
    """``fp32`` as static int8 QDQ at ``out`` with the region rule's float nodes and ``keep_float`` excluded;
    returns the pre-processed model, its ``Region`` and what the quantizer did."""
    import onnx

    from bridge.precision.regions import split_region

    prepared = prepared_once(fp32, workdir)
    region = split_region(onnx.load(str(prepared.path)), keep_float)
    info = quantize_qdq(prepared.path, out, calibration, [*region.float, *keep_float], workdir / "calibration.ranges")
    return prepared, region, info


def quantized_nodes(model: Any) -> list[str]:
    """Names of the nodes of a QDQ model that take a DequantizeLinear output (they run in int8)."""
    import onnx

    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    dq = {out for n in proto.graph.node if n.op_type == "DequantizeLinear" for out in n.output}
    return [n.name for n in proto.graph.node
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and any(i in dq for i in n.input)]


__all__ = ["Prepared", "cpu_has_vnni", "int8_qdq", "pre_process", "prepared_once", "quantize_qdq", "quantized_nodes"]
