"""The ``dataset`` section of a report (``--dataset``, issue 33): figures per runtime, the budget's verdict.

Shared by the Markdown report (``bridge.report``) and the HTML one (``bridge.report.html``).
"""

from __future__ import annotations

from typing import Any


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    if x is None:
        return "-"
    return str(x)


DATASET_COLUMNS = ("agreement_ap50", "agreement_ap50_95", "matched", "missed", "extra", "keypoint_pck",
                   "keypoint_error", "top1_agreement",
                   "top5_agreement", "miou", "map50", "map50_95", "top1_accuracy", "top5_accuracy", "images_per_s")


def dataset_columns(entries: dict[str, Any]) -> list[str]:
    """The figures any runtime of a ``dataset`` section has, in a fixed order."""
    return [c for c in DATASET_COLUMNS if any(c in e for e in entries.values())]


def dataset_verdict(run: dict[str, Any]) -> str:
    if run.get("cancelled"):
        c = run["cancelled"]
        return f"CANCELLED in the {c['runtime']} run after {c['images']} of {c['of']} images"
    return "PASS" if run.get("passed", True) else "FAIL: " + "; ".join(run.get("failures", []))


def budget_text(budget: dict[str, Any], ge: str = ">=", le: str = "<=") -> str:
    """The accuracy budget in one line, each bound with its option."""
    parts = [f"agreement {ge} {_fmt(budget.get('min_agreement'))} (--min-agreement)"]
    if budget.get("min_agreement_ap50_95") is not None:
        parts.append(f"agreement_ap50_95 {ge} {_fmt(budget.get('min_agreement_ap50_95'))} (--min-agreement-ap50-95)")
    if budget.get("min_keypoint_agreement") is not None:
        parts.append(f"keypoint_pck {ge} {_fmt(budget.get('min_keypoint_agreement'))} (--min-keypoint-agreement)")
    parts.append(f"mAP drop {le} {_fmt(budget.get('max_map_drop'))} (--max-map-drop)")
    return ", ".join(parts)


def dataset_markdown(entries: dict[str, Any], run: dict[str, Any]) -> str:
    """The ``dataset`` section: what ran on what, one row per runtime, the budget's verdict."""
    budget = run.get("budget") or {}
    pre = run.get("preprocessing") or {}
    out = [f"\n## Dataset: {dataset_verdict(run)}\n",
           f"- images: {run.get('input', '-')}; labels: {'yes' if run.get('labels') else 'none'}",
           f"- preprocessing: {pre.get('description', '-')}",
           f"- budget: {budget_text(budget)}"]
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
