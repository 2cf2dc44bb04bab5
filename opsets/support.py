"""Per-runtime support tables: which opsets and which op forms a target runtime accepts.

Read by passes that canonicalise a model for one runtime (``bridge.passes.resize``) and by the
TF target. Sources: onnx-tf's backend handler docs (doc/support_status.md and the
Resize handler's partial-support description); its handlers stop at opset 16.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ResizeForm:
    mode: str  # nearest | linear | cubic
    coordinate_transformation_mode: str
    nearest_mode: str | None = None  # only for mode=nearest


@dataclass(frozen=True)
class RuntimeSupport:
    name: str
    max_opset: int
    resize_forms: frozenset[ResizeForm] | None = None  # None: every form
    resize_rank: int | None = None  # required input rank, when restricted
    notes: tuple[str, ...] = field(default_factory=tuple)

    def accepts_resize(self, mode: str, coord: str, nearest_mode: str | None) -> bool:
        if self.resize_forms is None:
            return True
        return ResizeForm(mode, coord, nearest_mode if mode == "nearest" else None) in self.resize_forms


ONNX_TF = RuntimeSupport(
    name="onnx-tf",
    max_opset=16,
    resize_forms=frozenset({
        ResizeForm("nearest", "align_corners", "round_prefer_ceil"),
        ResizeForm("nearest", "asymmetric", "floor"),
        ResizeForm("nearest", "tf_half_pixel_for_nn", "floor"),
        ResizeForm("nearest", "tf_crop_and_resize", "round_prefer_ceil"),
        ResizeForm("linear", "align_corners"),
        ResizeForm("linear", "asymmetric"),
        ResizeForm("linear", "half_pixel"),
        ResizeForm("linear", "tf_crop_and_resize"),
        ResizeForm("cubic", "align_corners"),
        ResizeForm("cubic", "asymmetric"),
        ResizeForm("cubic", "half_pixel"),
    }),
    resize_rank=4,
    notes=("rejects nearest + half_pixel and nearest_mode=round_prefer_floor",
           "cubic only with cubic_coeff_a=-0.5 and exclude_outside=1"),
)

ONNXRUNTIME = RuntimeSupport(name="onnxruntime", max_opset=0)  # max_opset: see opsets.conversion.newest_runtime_opset

RUNTIMES: dict[str, RuntimeSupport] = {r.name: r for r in (ONNX_TF, ONNXRUNTIME)}


def runtime_support(name: str) -> RuntimeSupport:
    try:
        return RUNTIMES[name]
    except KeyError:
        raise KeyError(f"no support table for runtime {name!r} (known: {', '.join(sorted(RUNTIMES))})") from None
