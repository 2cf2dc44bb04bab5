"""Reports of a command's result: JSON (machine-readable, complete), Markdown or HTML (for people), by suffix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bridge.errors import UsageError
from bridge.io import atomic_write_text
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
    """A conversion that stopped with an error (``recipe.failure_report``): the error and how far each stage got."""
    err = data["error"]
    out = [f"# bridge convert: {data['source']}\n", f"- output: `{data['output']}` (NOT written)",
           f"- error: {err.get('type')} (exit code {_fmt(err.get('exit_code'))}): {err.get('message')}",
           "\n## Stages\n\n| stage | status | seconds | reason |\n|---|---|---|---|"]
    for name, stage in (data.get("stages") or {}).items():
        out.append(f"| {name} | {stage.get('status', '-')} | {_fmt(stage.get('seconds'))} | {_fmt(stage.get('reason'))} |")
    return "\n".join(out) + "\n"


def to_markdown(data: dict[str, Any]) -> str:
    out: list[str] = []
    cmd = data.get("command", "bridge")
    verdict = "PASS" if data.get("passed") else "FAIL"
    if cmd == "convert" and data.get("error") and "framework" not in data:
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
        out.append("| output | pass | shape | max abs | max rel | mismatch | atol/rtol | note |\n|---|---|---|---|---|---|---|---|")
        for o in comp["outputs"]:
            out.append(f"| {o['name']} | {'yes' if o['passed'] else 'NO'} | {o['cand_shape']} | {_fmt(o['max_abs'])} | "
                       f"{_fmt(o['max_rel'])} | {_fmt(o['mismatch_fraction'])} | {o['atol']:g}/{o['rtol']:g} | {o['note']} |")
    if data.get("dataset") is not None:
        out.append(dataset_markdown(data["dataset"], data.get("dataset_run") or {}))
    return "\n".join(out) + "\n"


# --- dataset validation (issue 33) ---
DATASET_COLUMNS = ("agreement_ap50", "agreement_ap50_95", "matched", "missed", "extra", "top1_agreement",
                   "top5_agreement", "miou", "map50", "map50_95", "top1_accuracy", "top5_accuracy", "images_per_s")


def dataset_columns(entries: dict[str, Any]) -> list[str]:
    """The figures any runtime of a ``dataset`` section has, in a fixed order."""
    return [c for c in DATASET_COLUMNS if any(c in e for e in entries.values())]


def dataset_verdict(run: dict[str, Any]) -> str:
    if run.get("cancelled"):
        c = run["cancelled"]
        return f"CANCELLED in the {c['runtime']} run after {c['images']} of {c['of']} images"
    return "PASS" if run.get("passed", True) else "FAIL: " + "; ".join(run.get("failures", []))


def dataset_markdown(entries: dict[str, Any], run: dict[str, Any]) -> str:
    """The ``dataset`` section: what ran on what, one row per runtime, the budget's verdict."""
    budget = run.get("budget") or {}
    pre = run.get("preprocessing") or {}
    out = [f"\n## Dataset: {dataset_verdict(run)}\n",
           f"- images: {run.get('input', '-')}; labels: {'yes' if run.get('labels') else 'none'}",
           f"- preprocessing: {pre.get('description', '-')}",
           f"- budget: agreement >= {_fmt(budget.get('min_agreement'))} (--min-agreement), drop <= "
           f"{_fmt(budget.get('max_map_drop'))} (--max-map-drop)"]
    out += [f"- note: {n}" for n in run.get("notes", [])]
    cols = dataset_columns(entries)
    out.append("\n| runtime | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for key, e in entries.items():
        name = f"source ({e.get('runtime')})" if key == "source" else key
        out.append(f"| {name} | " + " | ".join(_figure(e.get(c)) for c in cols) + " |")
    worst = run.get("worst") or []
    if worst:
        out.append("\nLargest disagreements: " + "; ".join(
            f"{w['runtime']} {w['name']} ({w['disagreement']:.3g}{', ' + w['note'] if w.get('note') else ''})"
            for w in worst))
    return "\n".join(out)


def _figure(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4f}" if x <= 1.0 else f"{x:.1f}"
    return _fmt(x)
# --- end dataset validation ---
