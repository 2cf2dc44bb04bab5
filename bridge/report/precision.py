"""The ``precision`` section of a report (``--precision``, issue 34): fp32 and the reduced-precision variant side by
side (agreement with the source, mAP and its drop, latency at batch 1 / 4, size on disk), the fallback rounds
and the layers kept float with what each cost, the verdict.

Shared by the Markdown report (``bridge.report``), the HTML one (``bridge.report.html``) and the CLI.
"""

from __future__ import annotations

from typing import Any

SIDE_COLUMNS = ("precision", "runtime", "agreement_ap50", "agreement_ap50_95", "map50", "map50_95", "map50_drop",
                "latency_b1_ms", "latency_b4_ms", "size_bytes")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def size_text(size: Any) -> str:
    if not isinstance(size, int):
        return "-"
    return f"{size / 2**20:.2f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


def side_columns(rows: list[dict[str, Any]]) -> list[str]:
    return [c for c in SIDE_COLUMNS if any(r.get(c) is not None for r in rows) or c in ("precision", "runtime")]


def cell(row: dict[str, Any], column: str) -> str:
    return size_text(row.get(column)) if column == "size_bytes" else _fmt(row.get(column))


def precision_verdict(data: dict[str, Any]) -> str:
    return "PASS" if data.get("passed") else "FAIL: " + str(data.get("failure") or "over budget")


def speed_line(data: dict[str, Any]) -> str | None:
    """``int8 vs fp32: 1.83x at b1, 1.91x at b4 (median latency; load average 14.2 ...)``."""
    speed = data.get("speed")
    if not speed:
        return None
    parts = [f"{r:.2f}x at b{b}" for b, r in (speed.get("speedup") or {}).items() if r is not None]
    load = speed.get("load_avg")
    loads = f"; load average {', '.join(f'{x:.1f}' for x in load)}" if load else ""
    return (f"{data['precision']} vs fp32 in {data['runtime']}: {', '.join(parts) or '-'} (median latency, same "
            f"interleaved rounds, {speed.get('iterations')} calls in {speed.get('rounds')} rounds{loads})")


def precision_markdown(data: dict[str, Any]) -> str:
    """The ``precision`` section as Markdown."""
    budget = data["settings"]["budget"]
    out = [f"\n## Precision {data['precision']} ({data['target']}): {precision_verdict(data)}\n",
           f"- budget ({budget['origin']}): agreement AP@0.5 with the source >= {budget['min_agreement']:g}, mAP "
           f"drop <= {budget['max_map_drop']:g}",
           f"- variant: {data['destination']}" + ("" if data.get("written") else " (not written)")]
    if data.get("calibration"):
        out.append(f"- calibration: {data['calibration']}")
    rows = data.get("side_by_side") or []
    cols = side_columns(rows)
    out += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r, c) for c in cols) + " |" for r in rows]
    line = speed_line(data)
    if line:
        out.append(f"\n{line}")
    rounds = data.get("rounds") or []
    if len(rounds) > 1 or (rounds and rounds[0].get("kept_float")):
        out += ["", "| round | kept float | agreement_ap50 | map50 | verdict |", "|---|---|---|---|---|"]
        for r in rounds:
            f = r.get("figures") or {}
            out.append(f"| {r['round']} | {', '.join(r['kept_float']) or '-'} | {_fmt(f.get('agreement_ap50'))} | "
                       f"{_fmt(f.get('map50'))} | {'pass' if r['passed'] else 'fail: ' + '; '.join(r['failures'] or [r.get('error') or ''])} |")
    costs = data.get("layer_costs") or []
    if costs:
        out += ["", f"Per-layer cost ({data.get('costs_measured_on')}), most costly first:", "",
                "| node | op | cost |", "|---|---|---|"]
        out += [f"| {c['node']} | {c['op']} | {c['cost']:.3g} |" for c in costs[:10]]
    build = (rounds[-1].get("build") if rounds else None) or {}
    if build.get("method"):
        out.append(f"\n- method: {build['method']}")
    for note in [*build.get("notes", []), *data.get("notes", [])]:
        out.append(f"- note: {note}")
    return "\n".join(out) + "\n"


__all__ = ["SIDE_COLUMNS", "cell", "precision_markdown", "precision_verdict", "side_columns", "size_text", "speed_line"]
