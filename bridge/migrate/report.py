"""Batch-migration reports: a BatchResult -> ``report.json``, ``report.md`` and a self-contained ``report.html``.

The HTML file has no external assets: one sortable table of every model (status, reason, exporter,
passes applied, opset, parity per runtime, times, peak memory, outputs) and one page per model
(an anchored section shown on its own, ``#model-NAME``) with that model's conversion report, so the
file can be mailed to the people who deploy the models. All three are written atomically.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from bridge.io import atomic_write_text
from bridge.migrate.results import BatchResult, ModelResult

REPORT_FILES = ("report.json", "report.md", "report.html")


def write_reports(batch: BatchResult, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    paths = [out_dir / name for name in REPORT_FILES]
    atomic_write_text(paths[0], json.dumps(batch.to_dict(), indent=2, default=str) + "\n")
    atomic_write_text(paths[1], to_markdown(batch))
    atomic_write_text(paths[2], to_html(batch))
    return paths


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _parity(m: ModelResult) -> str:
    if not m.parity:
        return (m.validation_skipped and "skipped") or "-"
    return "; ".join(f"{p.runtime} {'ok' if p.passed else 'FAIL'} abs {_num(p.max_abs)} rel {_num(p.max_rel)}"
                     for p in m.parity)


def _dataset_map(m: ModelResult) -> str:
    """``--dataset`` (issue 33): mAP@0.5 of the source and each runtime against the labels, and each runtime's
    agreement with the source (AP@0.5); the budget's verdict when it failed."""
    conv = m.conversion or {}
    entries = conv.get("dataset") or {}
    if not entries:
        return "-"
    maps = ", ".join(f"{key} {e['map50']:.3f}" for key, e in entries.items() if e.get("map50") is not None)
    agree = ", ".join(f"{key} {e['agreement_ap50']:.3f}" for key, e in entries.items()
                      if e.get("agreement_ap50") is not None)
    failed = not (conv.get("dataset_run") or {}).get("passed", True)
    return "; ".join(p for p in ((f"mAP@0.5 {maps}" if maps else ""), (f"agreement {agree}" if agree else ""),
                                 ("over budget" if failed else "")) if p) or "-"


def _target(m: ModelResult) -> str:
    """The delivery format (``--to``) and, once written, the target's own name for its artefact and converter,
    e.g. ``openvino: openvino (IR), openvino 2026.4.1``."""
    written = ((m.conversion or {}).get("target") or {}) if m.status == "passed" else {}
    details = ", ".join(str(written[k]) for k in ("target", "converter") if written.get(k))
    return f"{m.to}: {details}" if details else m.to


def _headline(batch: BatchResult) -> str:
    c = batch.counts
    run = batch.run
    wall = run.get("wall_s")
    return (f"{c['passed']} passed, {c['failed']} failed, {c['disabled']} disabled of {len(batch.models)} models"
            + (f" in {wall:.1f} s" if wall is not None else "") + f" ({run.get('executor', '?')})")


REASON_CHARS = 1500  # a reason is cut (with a pointer to report.json) only past this many characters


def reason_line(reason: str | None, limit: int = REASON_CHARS) -> str:
    """A failure reason on one line for a table cell: its lines joined with ``; `` (an unsupported-op error
    lists one op per line after its first). Past ``limit`` characters each line is shortened, not the tail
    cut off, so the head of every line (the op names) stays."""
    lines = [ln.strip() for ln in (reason or "").splitlines() if ln.strip()]
    if sum(len(ln) + 2 for ln in lines) > limit:
        share = max(60, limit // max(len(lines), 1))
        lines = [ln if len(ln) <= share else ln[:share].rstrip() + " ..." for ln in lines]
    text = ""
    for line in lines:
        text += line if not text else (" " if text.endswith(":") else "; ") + line
    return text if len(text) <= 2 * limit else text[:2 * limit].rstrip() + " ... (the whole reason is in report.json)"


def to_markdown(batch: BatchResult) -> str:
    lines = [f"# bridge migrate: {batch.run.get('manifest', '')}\n", f"**{_headline(batch)}**", ""]
    if batch.run.get("reused"):
        lines.append(f"Reused from an earlier run (--resume): {', '.join(batch.run['reused'])}\n")
    lines.append("| model | status | reason | target | exporter | passes applied | opset | parity | mAP (dataset) "
                 "| convert s | validate s | peak MiB | outputs |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in batch.models:
        reason = reason_line(m.reason).replace("|", "\\|")
        lines.append(f"| {m.name} | {m.status.upper() if m.status == 'failed' else m.status} | "
                     f"{(m.kind + ': ') if m.kind else ''}{reason} | {_target(m)} | {m.exporter or '-'} | "
                     f"{', '.join(m.passes_applied) or '-'} | {m.opset or '-'} | {_parity(m)} | {_dataset_map(m)} | "
                     f"{_num(m.convert_s, '.1f')} | "
                     f"{_num(m.validate_s, '.1f')} | {_num(m.peak_memory_mb, '.0f')} | "
                     f"{', '.join(f'`{v}`' for v in m.outputs.values()) or '-'} |")
    kept = [m for m in batch.models if m.kept]
    if kept:
        lines += ["", "Files in model folders that bridge did not write (left in place):", ""]
        lines += [f"- {m.name}: {', '.join(f'`{f}`' for f in m.kept)}" for m in kept]
    return "\n".join(lines) + "\n"


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.6em 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}th{background:#eee;cursor:pointer}
th.asc:after{content:" \\25b2"}th.desc:after{content:" \\25bc"}.passed{color:#176117}.failed{color:#b00;font-weight:bold}
.disabled{color:#777}code,pre{font:12px monospace}pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap}
section.model{display:none}section.model:target{display:block}section.model:target~#index{display:none}
td.reason{max-width:40em}
"""
_JS = """
document.querySelectorAll("table.sortable th").forEach((th, col) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], asc = !th.classList.contains("asc");
  th.parentNode.querySelectorAll("th").forEach(h => h.classList.remove("asc", "desc"));
  th.classList.add(asc ? "asc" : "desc");
  const key = r => { const c = r.cells[col], v = c.dataset.sort ?? c.textContent.trim(), n = parseFloat(v);
                     return isNaN(n) ? v.toLowerCase() : n; };
  [...body.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (asc ? 1 : -1))
    .forEach(r => body.appendChild(r));
}));
"""


def _e(x: Any) -> str:
    return html.escape("-" if x is None else str(x))


def _td(value: Any, sort: Any = None, cls: str = "") -> str:
    attrs = (f' data-sort="{_e(sort)}"' if sort is not None else "") + (f' class="{cls}"' if cls else "")
    return f"<td{attrs}>{value}</td>"


def _anchor(name: str) -> str:
    return f"model-{name}"


def to_html(batch: BatchResult) -> str:
    rows = []
    for m in batch.models:
        rows.append("<tr>" + "".join([
            _td(f'<a href="#{_anchor(m.name)}">{_e(m.name)}</a>', m.name),
            _td(_e(m.status), cls=m.status), _td(_e(m.kind or "")),
            _td(_e(reason_line(m.reason)), cls="reason"), _td(_e(_target(m)), m.to), _td(_e(m.exporter)),
            _td(_e(", ".join(m.passes_applied))),
            _td(_e(m.opset)), _td(_e(_parity(m))), _td(_e(_dataset_map(m))),
            _td(_num(m.convert_s, ".2f"), m.convert_s if m.convert_s is not None else -1),
            _td(_num(m.validate_s, ".2f"), m.validate_s if m.validate_s is not None else -1),
            _td(_num(m.elapsed_s, ".2f"), m.elapsed_s if m.elapsed_s is not None else -1),
            _td(_num(m.peak_memory_mb, ".0f"), m.peak_memory_mb if m.peak_memory_mb is not None else -1),
            _td(_e(m.speed or "")),
            _td("<br>".join(f"<code>{_e(v)}</code>" for v in m.outputs.values())),
        ]) + "</tr>")
    heads = ("model", "status", "kind", "reason", "target", "exporter", "passes applied", "opset", "parity",
             "mAP (dataset)", "convert s",
             "validate s", "total s", "peak MiB", "speed (median, vs source)", "outputs")
    index = (f'<div id="index"><h1>bridge migrate: {_e(batch.run.get("manifest", ""))}</h1><p><b>{_e(_headline(batch))}</b></p>'
             + (f"<p>Reused from an earlier run (--resume): {_e(', '.join(batch.run['reused']))}</p>"
                if batch.run.get("reused") else "")
             + '<p>Click a column to sort, a model for its conversion report.</p><table class="sortable"><thead><tr>'
             + "".join(f"<th>{h}</th>" for h in heads) + "</tr></thead><tbody>" + "\n".join(rows)
             + "</tbody></table></div>")
    pages = "\n".join(_model_page(m) for m in batch.models)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>bridge migrate report</title><style>{_CSS}</style>"
            f"</head><body>{pages}\n{index}<script>{_JS}</script></body></html>\n")


def _model_page(m: ModelResult) -> str:
    parts = [f'<section class="model" id="{_anchor(m.name)}"><p><a href="#">&larr; all models</a></p>',
             f"<h1>{_e(m.name)}: <span class='{m.status}'>{_e(m.status)}</span></h1>",
             f"<p>source <code>{_e(m.source)}</code> ({_e(m.framework)}) &rarr; {_e(m.to)}</p>"]
    if m.reason:
        parts.append(f"<h2>Reason ({_e(m.kind)})</h2><pre>{_e(m.reason)}</pre>")
    conv = m.conversion
    if conv:
        parts.append(f"<p>exporter {_e(conv.get('exporter'))}; opset {_e(conv.get('opset'))}; output "
                     f"<code>{_e(conv.get('output'))}</code> ({'written' if conv.get('written') else 'not written'}); "
                     "timings " + _e(", ".join(f"{k} {v:.2f}" for k, v in (conv.get("timings") or {}).items())) + "</p>")
        sig = [f"<tr><td>{_e(t['name'])}</td><td>{kind}</td><td>{_e(t.get('shape'))}</td><td>{_e(t.get('dtype'))}</td></tr>"
               for kind in ("inputs", "outputs") for t in conv.get(kind) or []]
        parts.append("<h2>Signature</h2><table><tr><th>tensor</th><th>kind</th><th>shape</th><th>dtype</th></tr>"
                     + "".join(sig) + "</table>")
        for title, key in (("Notes", "notes"), ("Warnings", "warnings")):
            if conv.get(key):
                parts.append(f"<h2>{title}</h2><ul>" + "".join(f"<li>{_e(x)}</li>" for x in conv[key]) + "</ul>")
        passes = [f"<tr><td>{_e(p['name'])}</td><td>{'yes' if p['modified'] else 'no'}</td><td>{p['seconds']:.3f}</td>"
                  f"<td>{_e(p['reason'])}</td></tr>" for p in conv.get("passes") or []]
        parts.append("<h2>Passes</h2><table><tr><th>pass</th><th>modified</th><th>s</th><th>why</th></tr>"
                     + "".join(passes) + "</table>")
        if conv.get("validation_skipped"):
            parts.append(f"<p>validation skipped: {_e(conv['validation_skipped'])}</p>")
        for comp in conv.get("validation") or []:
            rows = [f"<tr><td>{_e(o['name'])}</td><td class='{'passed' if o['passed'] else 'failed'}'>"
                    f"{'yes' if o['passed'] else 'NO'}</td><td>{_e(o.get('cand_shape'))}</td><td>{_num(o.get('max_abs'))}</td>"
                    f"<td>{_num(o.get('max_rel'))}</td><td>{_num(o.get('mismatch_fraction'))}</td>"
                    f"<td>{o.get('atol', 0):g}/{o.get('rtol', 0):g}</td><td>{_e(o.get('note'))}</td></tr>"
                    for o in comp.get("outputs") or []]
            parts.append(f"<h2>{_e(comp['candidate'])} vs {_e(comp['reference'])}: "
                         f"{'PASS' if comp['passed'] else 'FAIL'}</h2><table><tr><th>output</th><th>pass</th><th>shape</th>"
                         "<th>max abs</th><th>max rel</th><th>mismatch</th><th>atol/rtol</th><th>note</th></tr>"
                         + "".join(rows) + "</table>")
        if conv.get("dataset"):  # --dataset (issue 33): figures per runtime, the budget, the worst images
            from bridge.report.html import dataset_html

            parts.append(dataset_html(conv["dataset"], conv.get("dataset_run") or {}))
    parts.append("<h2>Outputs</h2><ul>" + "".join(f"<li>{_e(k)}: <code>{_e(v)}</code></li>" for k, v in m.outputs.items())
                 + "</ul>")
    if m.kept:
        parts.append("<h2>Files bridge did not write (left in place)</h2><ul>"
                     + "".join(f"<li><code>{_e(f)}</code></li>" for f in m.kept) + "</ul>")
    parts.append("</section>")
    return "\n".join(parts)
