"""Per-model and whole-batch results of a migration: worker outcome dicts -> typed records for reports.

A ``ModelResult`` keeps what the people deploying a model need (status, reason, exporter, passes
that changed the model, opset, parity per runtime, times, peak memory, output paths) plus the full
conversion report; ``BatchResult`` holds them in manifest order with the run's facts apart, so two
runs of the same manifest give equal ``models`` whatever ran when, where and how fast.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bridge.errors import EXIT_MISMATCH, EXIT_OK

STATUSES = ("passed", "failed", "disabled")
# Fields that change from run to run of the same models (left out when comparing reports).
RUN_DEPENDENT = ("convert_s", "validate_s", "elapsed_s", "peak_memory_mb", "timings", "seconds", "host",
                 "speed", "bench")


@dataclass
class Parity:
    """One candidate runtime against the source framework: verdict and the worst output figures."""

    runtime: str
    reference: str
    passed: bool
    max_abs: float | None
    max_rel: float | None
    mismatch_fraction: float | None
    failing_outputs: list[str] = field(default_factory=list)


@dataclass
class ModelResult:
    name: str
    status: str  # passed | failed | disabled
    kind: str | None = None  # why it failed: mismatch, conversion, usage, crash, memory, timeout, internal, unvalidated
    reason: str | None = None
    source: str = ""
    framework: str | None = None
    to: str = "onnx"
    exporter: str | None = None
    opset: int | None = None
    passes_applied: list[str] = field(default_factory=list)
    parity: list[Parity] = field(default_factory=list)
    validation_skipped: str | None = None
    warnings: int = 0
    convert_s: float | None = None
    validate_s: float | None = None
    elapsed_s: float | None = None
    peak_memory_mb: float | None = None
    speed: str | None = None  # manifest ``bench: true``: median latency per runtime and ratio to the source
    outputs: dict[str, str] = field(default_factory=dict)  # paths relative to --out
    # files in the model's folder that bridge did not write (a user's): left alone, named in the report
    kept: list[str] = field(default_factory=list)
    conversion: dict[str, Any] | None = None  # the model's full conversion report

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelResult:
        data = dict(data)
        data["parity"] = [Parity(**p) for p in data.get("parity", [])]
        return cls(**data)

    @classmethod
    def disabled(cls, entry: dict[str, Any]) -> ModelResult:
        options = entry["convert"]
        return cls(name=entry["name"], status="disabled", reason="disabled in the manifest", source=entry["source"],
                   framework=options["framework"], to=options["to"], opset=options["opset"])

    @classmethod
    def from_outcome(cls, entry: dict[str, Any], outcome: dict[str, Any], files: list[str],
                     kept: list[str] | None = None) -> ModelResult:
        """Build from a worker's outcome; ``files`` are the files bridge wrote in the model's folder, ``kept``
        the others found there (both relative to --out)."""
        conv = outcome.get("conversion") or {}
        timings = conv.get("timings") or {}
        parity = []
        for comp in conv.get("validation") or []:
            outs = comp.get("outputs") or []
            parity.append(Parity(
                runtime=comp["candidate"], reference=comp["reference"], passed=bool(comp["passed"]),
                max_abs=_worst(outs, "max_abs"), max_rel=_worst(outs, "max_rel"),
                mismatch_fraction=_worst(outs, "mismatch_fraction"),
                failing_outputs=[o["name"] for o in outs if not o.get("passed")]))
        outputs = {}
        for f in files:
            key = {"conversion.json": "report_json", "conversion.md": "report_md", "log.txt": "log"}.get(
                f.rsplit("/", 1)[-1])
            if key:
                outputs[key] = f
        if conv.get("written"):  # the files the conversion delivered, named by the target (kind -> path)
            outputs.update({d["kind"]: d["path"] for d in conv.get("files") or []})
        status = outcome["status"]
        kind, reason = outcome.get("kind"), outcome.get("reason")
        if status == "passed" and conv and not conv.get("written", True):
            status = "failed"  # defensive: a "passed" conversion whose model was not written is no pass
        skipped = (conv or {}).get("validation_skipped")
        cause = ((conv or {}).get("stages") or {}).get("validation", {}).get("cause")
        if status == "passed" and skipped and cause != "disabled" and not str(skipped).startswith("validation disabled"):
            # validation was asked for but could not run (e.g. the source framework is missing in this
            # environment): the record must not say the model was proved
            status, kind, reason = "failed", "unvalidated", f"not validated: {skipped}"
        return cls(
            name=entry["name"], status=status, kind=kind, reason=reason,
            source=entry["source"], framework=conv.get("framework") or entry["convert"].get("framework"),
            to=entry["convert"]["to"], exporter=conv.get("exporter"), opset=conv.get("opset", entry["convert"]["opset"]),
            passes_applied=[p["name"] for p in conv.get("passes") or [] if p.get("modified")],
            parity=parity, validation_skipped=conv.get("validation_skipped"), warnings=len(conv.get("warnings") or []),
            convert_s=sum(v for k, v in timings.items() if k != "validate_s") if timings else None,
            validate_s=timings.get("validate_s"), elapsed_s=outcome.get("elapsed_s"),
            peak_memory_mb=outcome.get("peak_memory_mb"), outputs=outputs, kept=list(kept or []),
            conversion=conv or None,
            speed=(conv.get("bench") or {}).get("summary"),
        )


def _worst(outputs: list[dict[str, Any]], key: str) -> float | None:
    values = [o[key] for o in outputs if o.get(key) is not None]
    return max(values) if values else None


@dataclass
class BatchResult:
    """Every model of the manifest (in its order) and the facts of the run that produced them."""

    models: list[ModelResult]
    run: dict[str, Any] = field(default_factory=dict)  # executor, jobs, wall time, models reused by --resume
    out_dir: str = ""

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(m.status == s for m in self.models) for s in STATUSES}

    @property
    def passed(self) -> bool:
        """Every enabled model passed."""
        return all(m.status != "failed" for m in self.models)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.passed else EXIT_MISMATCH

    @property
    def failed(self) -> list[ModelResult]:
        return [m for m in self.models if m.status == "failed"]

    def __getitem__(self, name: str) -> ModelResult:
        return next(m for m in self.models if m.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"command": "migrate", "passed": self.passed, "counts": self.counts, "run": self.run,
                "models": [m.to_dict() for m in self.models]}


def comparable(report: dict[str, Any]) -> Any:
    """A report (or any part of one) without what differs between runs of the same models: timings,
    peak memory, host, and the run section. Two runs of one manifest give equal ``comparable`` reports."""
    if isinstance(report, dict):
        return {k: comparable(v) for k, v in report.items() if k not in RUN_DEPENDENT and k != "run"}
    if isinstance(report, list):
        return [comparable(v) for v in report]
    return report
