"""ONNX -> OpenVINO IR (.xml + .bin) with OpenVINO's own converter, every unsupported op named first.

OpenVINO's model converter dropped its MXNet front end; its ONNX front end reads the ONNX stage's model
(MXNet's lowered detection ops included), so the IR is ``openvino.convert_model`` of that model with ONNX's
TopK tie rule restored (``bridge.runtimes.openvino.with_onnx_tie_rules``: OpenVINO's TopK is not stable by
default), saved with ``openvino.save_model`` - FP32 weights by default, FP16-compressed weights with ``compress="fp16"``
(OpenVINO decompresses them to f32 at load; inference stays f32).

Before conversion, the ONNX front end's partial conversion (``convert_partially``) says which nodes it
has no conversion rule for: they come back as framework nodes, and ``OpenVinoUnsupportedError`` lists
every one of them by op and ONNX node name. The IR is written to a temp folder beside its destination
and renamed into place (``.xml`` and ``.bin`` together), so a failure never leaves half an IR behind.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import onnx

from bridge.config import Option
from bridge.errors import ExportError, UnsupportedOpError, UsageError
from bridge.rewriting import default_opset
from bridge.runtimes import Runtime, get_runtime
from bridge.runtimes.openvino import import_openvino, with_onnx_tie_rules
from bridge.targets.base import TargetResult, onnx_output

logger = logging.getLogger(__name__)

TARGET_NAME = "openvino (IR)"
COMPRESSIONS = ("fp32", "fp16")


class OpenVinoUnsupportedError(UnsupportedOpError):
    """Nodes OpenVINO's ONNX front end has no conversion rule for."""

    def __init__(self, unsupported: Mapping[str, Iterable[str]]) -> None:
        super().__init__(unsupported)
        lines = str(self).split("\n", 1)[1]
        self.args = (f"{len(self.unsupported)} op type(s) cannot be converted by OpenVINO's ONNX front end:\n{lines}",)


def _save_onnx(model: Any, folder: Path) -> Path:
    """``model`` as an .onnx file OpenVINO can read (weights beside it when over protobuf's limit)."""
    if isinstance(model, (str, Path)):
        return Path(model)
    from bridge.io import save_model

    path = folder / "model.onnx"
    save_model(model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model), path)
    return path


def unsupported_nodes(onnx_path: Path) -> dict[str, list[str]]:
    """``{op: [ONNX node names]}`` for every node OpenVINO's ONNX front end cannot convert."""
    import_openvino("converting to OpenVINO IR")
    from openvino.frontend import FrontEndManager

    front_end = FrontEndManager().load_by_framework("onnx")
    loaded = front_end.load(str(onnx_path))  # kept alive: the partial model's framework nodes point into it
    partial = front_end.convert_partially(loaded)
    by_output: dict[str, str] = {}
    model = onnx.load(str(onnx_path), load_external_data=False)
    for index, node in enumerate(model.graph.node):
        for out in node.output:
            by_output[out] = node.name or f"<unnamed {node.op_type} #{index}>"
    found: dict[str, list[str]] = {}
    for op in partial.get_ordered_ops():
        if "FrameworkNode" not in op.get_type_name():
            continue
        attrs = op.get_attributes()
        domain, op_type = attrs.get("ONNX_META_domain", ""), attrs.get("ONNX_META_type", op.get_type_name())
        label = f"{domain}::{op_type}" if domain not in ("", "ai.onnx") else op_type
        friendly = op.get_friendly_name()
        found.setdefault(label, []).append(by_output.get(friendly, friendly))
    return found


def export_ir(model: Any, xml: str | Path, *, compress: str = "fp32") -> TargetResult:
    """Convert ``model`` (ModelProto, bytes or .onnx path) to an IR at ``xml`` (+ ``.bin`` beside it).

    Raises OpenVinoUnsupportedError before conversion for nodes OpenVINO cannot take, ExportError when its
    converter fails otherwise.
    """
    if compress not in COMPRESSIONS:
        raise UsageError(f"--compress {compress}: choose one of {', '.join(COMPRESSIONS)}")
    ov = import_openvino("converting to OpenVINO IR")
    start = time.perf_counter()
    xml = Path(xml)
    xml.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{xml.stem}.", suffix=".tmp", dir=xml.parent))
    try:
        onnx_path = _save_onnx(model, tmp)
        found = unsupported_nodes(onnx_path)
        if found:
            raise OpenVinoUnsupportedError(found)
        try:
            converted = with_onnx_tie_rules(ov.convert_model(str(onnx_path)))
            ov.save_model(converted, str(tmp / xml.name), compress_to_fp16=compress == "fp16")
        except Exception as exc:
            raise ExportError(f"OpenVINO failed to convert the model: {str(exc).strip()[:2000]}") from exc
        replace_ir(tmp / xml.name, xml)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    opset = _opset(onnx_path)
    seconds = time.perf_counter() - start
    logger.info("wrote OpenVINO IR %s in %.1f s", xml, seconds)
    notes = [f"OpenVINO IR weights stored as {compress.upper()}" + (" (decompressed to f32 at load)"
                                                                   if compress == "fp16" else ""), *precision_notes(ov)]
    return TargetResult(target=TARGET_NAME, path=xml, converter=f"openvino {ov.get_version().split('-')[0]}",
                        opset_in=opset, opset_out=opset, notes=notes, seconds=seconds)


def precision_notes(ov: Any) -> list[str]:
    """What a user compiling the IR with OpenVINO's defaults gets, when it is not what was validated: the CPU
    plugin picks its inference precision per machine (bf16 where the CPU has it, f16 on some ARM CPUs) and does
    not read a precision stored in the IR; bridge validates in f32 (``bridge.runtimes.openvino``)."""
    try:
        value = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    except Exception:  # a plugin without the property: nothing to say
        return []
    default = value.get_type_name() if hasattr(value, "get_type_name") else str(value)
    if default in ("f32", "float32"):
        return []
    return [f"validated in f32; OpenVINO's CPU plugin on this machine defaults to {default} inference, which rounds "
            "otherwise: compile the IR with {'INFERENCE_PRECISION_HINT': 'f32'} to get the validated numbers"]


def _opset(onnx_path: Path) -> int:
    if not onnx_path.exists():
        return 0
    return int(default_opset(onnx.load(str(onnx_path), load_external_data=False), missing=0))


def ir_files(xml: Path) -> tuple[Path, Path]:
    return xml, xml.with_suffix(".bin")


def replace_ir(src: Path, dst: Path) -> Path:
    """Move the IR ``src`` (.xml + .bin) to ``dst``: both files are staged beside ``dst`` (one filesystem)
    and renamed into place, .bin first so a reader never sees the new .xml with the old .bin."""
    if dst.suffix != ".xml":
        raise UsageError(f"{dst}: an OpenVINO IR path must end in .xml")
    dst.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    staged = []
    for s, d in zip(ir_files(src), ir_files(dst), strict=True):
        tmp = d.with_name(f".{d.name}.{token}.tmp")
        shutil.copyfile(s, tmp)
        staged.append((tmp, d))
    for tmp, d in reversed(staged):  # .bin, then .xml
        os.replace(tmp, d)
    return dst


def ir_destination(destination: Path) -> Path:
    """Where the IR goes for convert's artefact destination: ``X.xml`` as given, else ``<stem>.xml``."""
    if destination.suffix == ".xml":
        return destination
    return destination.with_name(destination.name.removesuffix("_saved_model") + ".xml")


class OpenVinoTarget:
    """``--to openvino``: an OpenVINO IR (.xml + .bin) converted from the validated ONNX, run by OpenVINO."""

    name = "openvino"
    artefact = True  # writes something besides the validated .onnx
    runtimes = ("openvino",)
    default_runtimes = ("onnxruntime", "openvino")
    options = (Option("compress", str, "fp32", "--to openvino: IR weights fp32|fp16 (fp16 is lossy: validate with a "
                      "stated --atol/--rtol)", choices=lambda: COMPRESSIONS),)

    def __init__(self, compress: str = "fp32") -> None:
        if compress not in COMPRESSIONS:
            raise UsageError(f"--compress {compress}: choose one of {', '.join(COMPRESSIONS)}")
        self.compress = compress

    def place(self, output: Path, artefact_dir: Path | None, options: Mapping[str, Any]) -> tuple[Path, dict[str, Path]]:
        """``-o X.xml`` names the IR (the validated ONNX goes beside it as X.onnx); else ``<stem>.xml`` goes to
        ``--artefact-dir`` or beside the .onnx."""
        if output.suffix.lower() == ".xml":
            return output.with_suffix(".onnx"), {"ir": output}
        return onnx_output(output), {"ir": (artefact_dir or output.parent) / f"{output.stem}.xml"}

    def export(self, model: onnx.ModelProto, staging: Path) -> TargetResult:
        return export_ir(model, staging / "model.xml", compress=self.compress)

    def commit(self, staged: Path, destination: Path) -> Path:
        return replace_ir(Path(staged), ir_destination(Path(destination)))

    def runtime(self, name: str, model: Any, workdir: Path) -> Runtime:
        # the IR is built when the runtime is activated (loading apart from running)
        compress = self.compress
        return get_runtime(name, lambda: export_ir(model, Path(workdir) / "model.xml", compress=compress).path)
