"""Reports of a command's result: JSON (machine-readable, complete), Markdown or HTML (for people), by suffix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bridge.errors import UsageError
from bridge.io import atomic_write_text
from bridge.report.dataset import dataset_markdown
from bridge.report.sizes import one_size_text, sizes_text


def write_report(data: dict[str, Any], path: Path) -> None:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        text = json.dumps(data, indent=2, default=str)
    elif suffix in (".md", ".markdown"):
        text = to_markdown(data)
    elif suffix in (".html", ".htm"):
        from bridge.report.html import to_html

        text = to_html(data)
    else:
        raise UsageError(f"--report {path}: use a .json, .md or .html file")
    atomic_write_text(path, text)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    if x is None:
        return "-"
    return str(x)


def _shape(meta: dict[str, Any]) -> str:
    shape = meta.get("shape")
    return "unknown" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _failure_markdown(data: dict[str, Any]) -> str:
    """A conversion (``recipe.failure_report``) or a validation that stopped with an error or Ctrl-C: the error and
    how far each stage got."""
    err = data["error"]
    out = [f"# bridge {data.get('command')}: {data.get('source') or data.get('model')}\n",
           *([f"- output: `{data['output']}` (NOT written)"] if "output" in data else []),
           f"- error: {err.get('type')} (exit code {_fmt(err.get('exit_code'))}): {err.get('message')}",
           "\n## Stages\n\n| stage | status | seconds | reason |\n|---|---|---|---|"]
    for name, stage in (data.get("stages") or {}).items():
        out.append(f"| {name} | {stage.get('status', '-')} | {_fmt(stage.get('seconds'))} | {_fmt(stage.get('reason'))} |")
    return "\n".join(out) + "\n"


def to_markdown(data: dict[str, Any]) -> str:
    out: list[str] = []
    cmd = data.get("command", "bridge")
    verdict = "PASS" if data.get("passed") else "FAIL"
    if cmd in ("convert", "validate") and data.get("error") and "framework" not in data and "comparisons" not in data:
        return _failure_markdown(data)
    if cmd in ("convert", "debug"):
        out.append(f"# bridge {cmd}: {data['source']}\n")
        if cmd == "debug":
            culprit = data.get("culprit")
            out.append(f"- culprit: {culprit['summary'] if culprit else 'none (every compared tensor agrees)'}")
        out.append(f"- framework: {data['framework']}; exporter: {data['exporter']}; opset: {data['opset']}")
        out.append(f"- output: `{data['output']}` ({'written' if data['written'] else 'NOT written'})")
        out.append(f"- validation: {verdict if data['validation'] else 'skipped: ' + str(data['validation_skipped'])}")
        t = data.get("timings", {})
        out.append("- timings: " + ", ".join(f"{k} {v:.2f}" for k, v in t.items()) + "\n")
        out.append("## Signature\n\n| tensor | kind | shape | dtype |\n|---|---|---|---|")
        for kind in ("inputs", "outputs"):
            for m in data[kind]:
                out.append(f"| {m['name']} | {kind[:-1]} | {_shape(m)} | {m['dtype']} |")
        if data.get("notes"):
            out.append("\n## Notes\n" + "\n".join(f"- {n}" for n in data["notes"]))
        out.append("\n## Warnings\n" + ("\n".join(f"- {w}" for w in data["warnings"]) or "none"))
        out.append("\n## Passes\n\n| pass | modified | seconds | why |\n|---|---|---|---|")
        for p in data["passes"]:
            out.append(f"| {p['name']} | {'yes' if p['modified'] else 'no'} | {p['seconds']:.3f} | {p['reason']} |")
        comparisons = data["validation"]
        if data.get("validation_inputs"):
            out.append("\nValidation inputs: " + sizes_text(data.get("validation_sizes") or [data["validation_inputs"]]))
        if data.get("second_size_skipped"):
            out.append(f"\n**{one_size_text(data['second_size_skipped']).replace(': ', ':** ', 1)}")
    else:
        out.append(f"# bridge validate: {data['model']}\n\n- reference: {data['reference']}\n- verdict: {verdict}")
        if data.get("inputs"):
            out.append("- validated at: " + sizes_text(data.get("sizes") or [data["inputs"]]))
        if data.get("second_size_skipped"):
            out.append(f"- **{one_size_text(data['second_size_skipped']).replace(': ', ':** ', 1)}")
        comparisons = data["comparisons"]
    for comp in comparisons:
        out.append(f"\n## {comp['candidate']} vs {comp['reference']}: {'PASS' if comp['passed'] else 'FAIL'}\n")
        if comp.get("vacuous"):
            out.append("**Vacuous:** the check proves little: " + "; ".join(comp.get("vacuous_reasons", [])) + "\n")
        if comp.get("pinning"):  # the upstream tie proof (bridge.validation.pinning): what was pinned, or why not
            out.append(f"**Pinning:** {comp['pinning'].get('text', '')}\n")
        if comp.get("selection_inputs"):  # every row the selections could pick (bridge.conversion.selection_inputs)
            out.append(f"**Selection inputs:** {comp['selection_inputs'].get('text', '')}\n")
        out.append("| output | pass | shape | max abs | max rel | mismatch | tolerance | note |\n|---|---|---|---|---|---|---|---|")
        for o in comp["outputs"]:
            # the elementwise rule that judged the output and why (bridge.validation.tolerance), else atol/rtol
            tolerance = o.get("tolerance_rule") or f"{o['atol']:g}/{o['rtol']:g}"
            out.append(f"| {o['name']} | {'yes' if o['passed'] else 'NO'} | {o['cand_shape']} | {_fmt(o['max_abs'])} | "
                       f"{_fmt(o['max_rel'])} | {_fmt(o['mismatch_fraction'])} | {tolerance} | {o['note']} |")
    if data.get("dataset") is not None:
        out.append(dataset_markdown(data["dataset"], data.get("dataset_run") or {}))
    if data.get("precision") is not None:  # --precision (issue 34)
        from bridge.report.precision import precision_markdown

        out.append(precision_markdown(data["precision"]))
    return "\n".join(out) + "\n"

