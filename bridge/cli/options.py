"""Options shared by many ``bridge`` commands, and their parsers (Polygraphy's ``tools/args`` idea).

Every command takes its input, tolerance, seed, opset and JSON options from here, so a flag means
the same thing and has the same default everywhere; defaults are read from the config types
(``Tolerance()``), never written out again. Convert's own options (and debug's) are not here: they are
declared once in ``bridge.conversion.options`` and the commands are derived from it. The parsers turn option strings
into config objects; ``bridge.api`` never sees argv.

Values read from other layers (the default tolerance and timeout, the convert options' declarations) are
resolved on first use (``__getattr__``): a command that takes none of them (``inspect``, ``graft-nms``)
shows its help without importing numpy and onnx.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from bridge.config import Tolerance

InputOpt = Annotated[list[str], typer.Option("--input", "-i", metavar="NAME:SHAPE[:DTYPE]", help=(
    "an input's shape (and dtype), e.g. images:4,3,64,64 or data:1,3,224,224:float16 (repeatable)"))]
OutputOpt = Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="the .onnx file to write")]
AtolOpt = Annotated[float, typer.Option(help="absolute tolerance")]
RtolOpt = Annotated[float, typer.Option(help="relative tolerance")]
ToleranceOpt = Annotated[list[str], typer.Option(metavar="NAME=ATOL,RTOL", help=(
    "tolerances of one output, e.g. scores=1e-3,1e-2 (repeatable)"))]
def _seed(value: int) -> int:
    if not 0 <= value < 2**63:  # numpy seeds from 0 up (checked here, not with min/max: --help would show the range)
        raise typer.BadParameter(f"{value}: must be an integer from 0 to 2**63 - 1")
    return value


SeedOpt = Annotated[int, typer.Option(metavar="N", callback=_seed, help="seed for generated validation inputs")]
FeedsOpt = Annotated[Path | None, typer.Option(metavar="FILE.npz", help="validation inputs: .npz keyed by input name (default: seeded noise)")]
ReportOpt = Annotated[Path | None, typer.Option(metavar="FILE", help="write a report (.json or .md)")]
WeightsOpt = Annotated[Path | None, typer.Option("--weights", "--params", metavar="FILE", help="state_dict (.pt) or MXNet .params")]
AsJsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
MaxMemoryOpt = Annotated[str | None, typer.Option("--max-memory", metavar="SIZE", help="limit for sizes files declare and for "
                                                 "reference/runtime children, e.g. 4G (default: half the RAM, or "
                                                 "BRIDGE_MAX_MEMORY)")]
StrictOpt = Annotated[bool, typer.Option("--strict", help="a vacuous verdict (nothing real compared: no detections, "
                                         "all-NaN outputs, a 0-sized dim) or dynamic axes checked at one size "
                                         "only fail validation (exit 1); pinning then excuses only choices on "
                                         "inputs within 4 float32 ulps of the source's")]
TrustOpt = Annotated[bool, typer.Option("--trust-source", help="run the source for validation even if its graph has "
                                        "side effects (file writes, Python callbacks)")]
IsolateOpt = Annotated[bool, typer.Option("--isolate/--no-isolate", help="run the source reference and each runtime "
                                          "in a child process with time and memory limits")]
TimeoutOpt = Annotated[float, typer.Option(metavar="SECONDS", help="seconds each reference/runtime step may take in its child process")]


def _convert_option(name: str, **overrides: Any) -> Any:
    """A convert option's typer declaration (help and placeholder as declared once in bridge.conversion.options)."""
    from bridge.conversion.options import CORE

    o = next(o for o in CORE if o.name == name)
    return typer.Option(*o.cli_flags, help=o.help, metavar=o.metavar, **overrides)


def __getattr__(name: str) -> Any:
    if name in ("DEFAULT_ATOL", "DEFAULT_RTOL"):
        from bridge.config import DEFAULT_TOLERANCE

        return DEFAULT_TOLERANCE.atol if name == "DEFAULT_ATOL" else DEFAULT_TOLERANCE.rtol
    if name == "DEFAULT_TIMEOUT":
        from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S

        return DEFAULT_TIMEOUT_S
    declared = {"DetectionsOpt": (list[str], "detections"), "InputKindOpt": (str | None, "input_kind"),
                "InputRangeOpt": (str | None, "input_range"), "PinningOpt": (bool, "pinning")}
    if name in declared:
        kind, option = declared[name]
        return Annotated[kind, _convert_option(option)]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tolerance_from(atol: float, rtol: float, per_output: list[str] | None = None) -> Tolerance:
    """``--atol/--rtol`` plus ``--tolerance NAME=ATOL,RTOL`` overrides as one Tolerance."""
    from bridge.config import Tolerance

    return Tolerance.parse_override(Tolerance(atol, rtol), per_output or [])


def runtimes_from(text: str | None) -> list[str] | None:
    """``onnxruntime,tensorflow`` -> names; ``none`` -> [] (no validation); None -> the default."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return []
    return [t.strip() for t in text.split(",") if t.strip()]
