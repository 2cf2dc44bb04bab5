"""``bridge bench`` reports from ``BenchResult.to_dict()``: JSON for machines, a Markdown table, and a
self-contained HTML page (inline CSS and SVG, nothing fetched) plotting each batch size's latency
distribution per runner: every call as a dot over a box from p10 to p90, the median marked.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bridge.bench.timing import percentile
from bridge.errors import UsageError
from bridge.io import atomic_write_text

COLUMNS = ("runner", "batch", "p50 ms", "p90 ms", "p99 ms", "min ms", "max ms", "items/s", "first run s",
           "peak MiB", "vs source")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def rows(data: dict[str, Any]) -> list[list[str]]:
    """One row per runner and batch size, in the order measured (the table of the Markdown and HTML)."""
    ratios = data.get("ratios_vs_source", {})
    variants, vs_base = data.get("variants") or {}, data.get("ratios_vs_base") or {}
    out = []
    for cell in data["results"]:
        lat = cell.get("latency")
        r = ratios.get(f"{cell['runner']}@{cell['batch']}")
        vs = "source" if cell["runner"] == data.get("reference") else (f"{r:.2f}x" if r is not None else "-")
        base = vs_base.get(f"{cell['runner']}@{cell['batch']}")
        if cell["runner"] in variants and base is not None:  # another file in a runtime: against that runtime
            vs = f"{base:.2f}x {variants[cell['runner']]['runtime']}"
        if lat is None:
            out.append([cell["runner"], str(cell["batch"]), *(["-"] * 8), f"failed: {cell.get('error') or '?'}"])
            continue
        peak = cell.get("peak_rss_bytes")
        out.append([cell["runner"], str(cell["batch"]), _num(lat["p50_ms"]), _num(lat["p90_ms"]), _num(lat["p99_ms"]),
                    _num(lat["min_ms"]), _num(lat["max_ms"]), _num(cell.get("throughput_per_s")),
                    _num(cell.get("first_run_s")), "-" if peak is None else f"{peak / 2**20:.0f}", vs])
    return out


def summary(data: dict[str, Any]) -> str:
    """One line: each runtime's median latency per batch size and its ratio to the source (migration reports)."""
    ratios = data.get("ratios_vs_source", {})
    parts = []
    for cell in data.get("results", []):
        if cell["runner"] == data.get("reference"):
            continue
        lat, r = cell.get("latency"), ratios.get(f"{cell['runner']}@{cell['batch']}")
        parts.append(f"{cell['runner']} b{cell['batch']} " + ("failed" if lat is None else f"{lat['p50_ms']:.3g} ms")
                     + (f" ({r:.2f}x {data['reference']})" if r is not None else ""))
    return "; ".join(parts) or "-"


def _machine_line(data: dict[str, Any]) -> str:
    m, s = data["machine"], data["settings"]
    load = ", ".join(f"{x:.2f}" for x in m.get("load_avg", []))
    if m.get("load_avg_end"):
        load += " at the start, " + ", ".join(f"{x:.2f}" for x in m["load_avg_end"]) + " at the end"
    how = f"{s['iterations']} calls" if s.get("iterations") else f"{s['seconds']:g} s"
    return (f"{m.get('cpu') or '?'}, {m.get('cores')} cores ({m.get('usable_cores')} usable), load average {load or '?'}; "
            f"{how} per runner and batch in {s['rounds']} interleaved rounds after {s['warmup']} warm-up calls, "
            f"threads {s.get('threads') or 'runtime default'}; inputs {s.get('inputs')}")


def _loads(data: dict[str, Any]) -> str:
    loads = [f"{r['name']} {r['load_s']:.2f} s" for r in data["runners"] if r.get("load_s") is not None]
    return "Load (process start, framework import, model load / compile): " + (", ".join(loads) or "-") + "."


def to_markdown(data: dict[str, Any]) -> str:
    lines = [f"# bridge bench: {data['model']}", ""]
    if data.get("source"):
        lines.append(f"Source: {data['source']} ({data.get('reference') or 'not run'}); ratio = source median "
                     "latency / runtime median latency (> 1: faster than the source).")
    lines += [f"Machine: {_machine_line(data)}.", "", "| " + " | ".join(COLUMNS) + " |",
              "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows(data)]
    failed = [r for r in data["runners"] if r.get("error")]
    lines += ["", _loads(data)]
    lines += [f"- {r['name']}: {r['error']}" for r in failed]
    lines += [f"- {n}" for n in data.get("notes", []) if not any(n.startswith(r["name"]) for r in failed)]
    return "\n".join(lines) + "\n"


def latency_svg(runners: Sequence[str], samples: Sequence[Sequence[float]], title: str, width: int = 640) -> str:
    """Inline SVG: per runner, its calls' latencies (ms) as dots over a p10-p90 box with the median marked."""
    lane, left, top, axis = 34, 130, 26, 28
    height = top + lane * len(runners) + axis
    hi = max((max(s) for s in samples if s), default=1.0) * 1.05 or 1.0
    span = width - left - 20

    def x(v: float) -> float:
        return left + span * v / hi

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'class="latency-plot"><title>{html.escape(title)}</title>',
             f'<text x="{left}" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for i in range(6):  # axis ticks, ms
        v = hi * i / 5
        parts.append(f'<line x1="{x(v):.1f}" y1="{top}" x2="{x(v):.1f}" y2="{height - axis}" stroke="#ddd"/>'
                     f'<text x="{x(v):.1f}" y="{height - axis + 14}" font-size="11" text-anchor="middle">{v:.3g}</text>')
    parts.append(f'<text x="{left + span / 2:.1f}" y="{height - 2}" font-size="11" text-anchor="middle">ms per call</text>')
    for i, (name, values) in enumerate(zip(runners, samples, strict=True)):
        y = top + lane * i + lane / 2
        colour = PALETTE[i % len(PALETTE)]
        parts.append(f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="12" text-anchor="end">{html.escape(name)}</text>')
        if not values:
            parts.append(f'<text x="{left + 4}" y="{y + 4:.1f}" font-size="11" fill="#999">no timings</text>')
            continue
        p10, p50, p90 = (percentile(values, q) for q in (10, 50, 90))
        parts.append(f'<rect x="{x(p10):.1f}" y="{y - 9:.1f}" width="{max(x(p90) - x(p10), 1):.1f}" height="18" '
                     f'fill="{colour}" fill-opacity="0.18" stroke="{colour}"/>')
        for k, v in enumerate(values):  # deterministic jitter keeps the page reproducible
            parts.append(f'<circle cx="{x(v):.1f}" cy="{y - 7 + (k * 7919 % 15):.1f}" r="1.8" fill="{colour}" '
                         'fill-opacity="0.6"/>')
        parts.append(f'<line x1="{x(p50):.1f}" y1="{y - 12:.1f}" x2="{x(p50):.1f}" y2="{y + 12:.1f}" '
                     f'stroke="{colour}" stroke-width="3"><title>median {p50:.3g} ms</title></line>')
    parts.append("</svg>")
    return "".join(parts)


_STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}"
          "th{background:#f3f3f3}.note{color:#555}")


def to_html(data: dict[str, Any]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows(data))
    plots = []
    for batch in data["settings"]["batches"]:
        cells = [c for c in data["results"] if c["batch"] == batch]
        plots.append(latency_svg([c["runner"] for c in cells], [c.get("samples_ms", []) for c in cells],
                                 f"batch {batch}: latency per call"))
    notes = [f"{r['name']}: {r['error']}" for r in data["runners"] if r.get("error")] + list(data.get("notes", []))
    source = (f"<p>Source: {e(data['source'])} ({e(data.get('reference') or 'not run')}); ratio = source median latency "
              "/ runtime median latency (&gt; 1: faster than the source).</p>") if data.get("source") else ""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>bridge bench: " + e(data["model"])
            + f"</title><style>{_STYLE}</style></head><body><h1>bridge bench: {e(data['model'])}</h1>{source}"
            + f"<p class='note'>Machine: {e(_machine_line(data))}</p><p class='note'>{e(_loads(data))}</p>"
            + f"<table><tr>{head}</tr>{body}</table>" + "".join(f"<div>{p}</div>" for p in plots)
            + "".join(f"<p class='note'>{e(n)}</p>" for n in notes) + "</body></html>\n")


FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}


def report_format(path: Path) -> str:
    """json | md | html from ``path``'s suffix; UsageError otherwise (checked before anything runs)."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"--report {path}: use a .json, .md or .html file")
    return fmt


def write_bench_report(data: dict[str, Any], path: Path) -> None:
    """``path``'s suffix picks the format: .json, .md or .html (written atomically)."""
    fmt = report_format(path)
    text = json.dumps(data, indent=1, default=str) if fmt == "json" else to_markdown(data) if fmt == "md" \
        else to_html(data)
    atomic_write_text(path, text)
