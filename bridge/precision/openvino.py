"""``--to openvino --precision int8|fp16``: an OpenVINO IR beside the fp32 one, run by OpenVINO.

int8: NNCF post-training quantization (``nncf.quantize``, the ``performance`` preset: symmetric int8 weights
and activations) of the IR that OpenVINO's ONNX front end makes from the pre-processed fp32 model
(``bridge.precision.onnx_int8.prepared_once``: BatchNormalization folded into Conv, so every Conv keeps its
ONNX node name), calibrated on the calibration images. The float region (``bridge.precision.regions``) and
the nodes the fallback keeps float go to NNCF's ``IgnoredScope`` by name: OpenVINO names the op made from
an ONNX node after it (``conv`` for the bias Add, ``conv/WithoutBiases`` for the Convolution), so an op is
ignored when its name is a float node's name or starts with it and ``/``.

fp16: the IR's weights stored as float16 (``openvino.save_model(compress_to_fp16=True)``, what ``--compress
fp16`` does); OpenVINO's CPU plugin decompresses them and infers in f32 on a CPU without AVX512-FP16/AMX, so
the gain is the file's size, stated with the figures.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.errors import ExportError, UsageError
from bridge.precision.base import VariantBuild, variant_path
from bridge.precision.calibration import Calibration


def ignored_names(ov_model: Any, float_nodes: Sequence[str]) -> list[str]:
    """OpenVINO op names standing for the ONNX nodes ``float_nodes`` (module docstring)."""
    wanted = set(float_nodes)
    found = []
    for op in ov_model.get_ordered_ops():
        name = op.get_friendly_name()
        # ONNX names may hold '/' themselves (detection/Mul_100): try every prefix ending before a '/'
        if name in wanted or any(name[:k] in wanted for k, c in enumerate(name) if c == "/"):
            found.append(name)
    return found


class OpenVinoVariants:
    target = "openvino"
    runtime = "openvino"
    precisions = ("int8", "fp16")
    refused: Mapping[str, str] = {}
    keeps_layers_float = True

    def destination(self, output: Path, artefacts: Mapping[str, Path], precision: str) -> Path:
        from bridge.targets.openvino import ir_destination

        return variant_path(ir_destination(artefacts["ir"]), precision)

    def build(self, fp32: Path, precision: str, staging: Path, *, calibration: Calibration | None,
              keep_float: Sequence[str], workdir: Path) -> VariantBuild:
        from bridge.targets.openvino import export_ir

        start = time.perf_counter()
        xml = staging / f"model.{precision}.xml"
        if precision == "fp16":
            result = export_ir(fp32, xml, compress="fp16")
            return VariantBuild(result.path, "fp16", f"{result.converter}: weights stored as float16 "
                                "(decompressed to f32 at load; inference stays f32 on this CPU)",
                                notes=list(result.notes), seconds=time.perf_counter() - start)
        if precision != "int8":
            raise UsageError(f"--precision {precision} --to openvino: choose int8 or fp16")
        if calibration is None:
            raise UsageError("--precision int8 needs calibration images (--calibration or --dataset)")
        return self._int8(fp32, xml, calibration, keep_float, workdir, start)

    def _int8(self, fp32: Path, xml: Path, calibration: Calibration, keep_float: Sequence[str], workdir: Path,
              start: float) -> VariantBuild:
        import onnx

        from bridge.chatter import quiet
        from bridge.precision.onnx_int8 import prepared_once
        from bridge.precision.regions import split_region
        from bridge.runtimes.openvino import import_openvino
        from bridge.targets.openvino import OpenVinoUnsupportedError, unsupported_nodes

        ov = import_openvino("quantizing for OpenVINO")
        try:
            import nncf
        except ImportError as exc:
            from bridge.errors import AdapterUnavailableError

            raise AdapterUnavailableError("nncf", "--precision int8 --to openvino", "nncf (pip install "
                                          "'bridge[precision]')") from exc
        prepared = prepared_once(fp32, workdir)
        found = unsupported_nodes(prepared.path)
        if found:
            raise OpenVinoUnsupportedError(found)
        region = split_region(onnx.load(str(prepared.path)), keep_float)
        try:
            model = ov.convert_model(str(prepared.path))
            ignored = ignored_names(model, region.float)
            items = list(calibration)
            with quiet(["nncf", "openvino"], "NNCF post-training quantization", stderr=True):
                nncf.set_log_level(40)  # logging.ERROR: NNCF's progress bars and statistics would fill the CLI
                quantized = nncf.quantize(model, nncf.Dataset(items), preset=nncf.QuantizationPreset.PERFORMANCE,
                                          subset_size=len(items), ignored_scope=nncf.IgnoredScope(names=ignored,
                                                                                                  validate=False))
            xml.parent.mkdir(parents=True, exist_ok=True)
            ov.save_model(quantized, str(xml), compress_to_fp16=False)
        except (OpenVinoUnsupportedError, UsageError):
            raise
        except Exception as exc:  # NNCF's or OpenVINO's own failure, named
            raise ExportError(f"NNCF post-training quantization failed: {str(exc).strip()[:2000]}") from exc
        fq = sum(1 for op in quantized.get_ordered_ops() if op.get_type_name() == "FakeQuantize")
        return VariantBuild(xml, "int8", f"NNCF {nncf.__version__} post-training quantization (performance preset: "
                            f"symmetric int8), {fq} FakeQuantize ops, calibrated on {calibration.describe()}",
                            quantized=list(region.quantized), kept_float=list(keep_float),
                            notes=[*prepared.notes, region.describe(),
                                   f"{len(ignored)} OpenVINO ops of the float region in NNCF's ignored scope"],
                            seconds=time.perf_counter() - start)

    def commit(self, staged: Path, destination: Path) -> Path:
        from bridge.targets.openvino import replace_ir

        return replace_ir(Path(staged), destination)


__all__ = ["OpenVinoVariants", "ignored_names"]
