"""A self-contained HTML report (no network: styles inline, pictures as data: URIs) of a command's result.

Renders the plain dict a result's ``to_dict()`` gives (``convert``, ``validate`` or ``debug``): the
signature, the passes table, the per-output comparison and, for ``debug``, the verdict (culprit node,
op, attributes, input/output statistics), the divergence table with the culprit highlighted, per-element
error histograms of failing outputs and detection overlays (``bridge.report.images``, Pillow). Without
Pillow the pictures are left out with a note; everything else is text.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bridge.errors import install_command
from bridge.io import atomic_write_text
from bridge.report import images
from bridge.report.images import Overlay

MAX_TABLE_ROWS = 2000  # divergence rows shown (all are in the JSON report)

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1280px;color:#1b1b1b;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;width:100%;margin:6px 0;font-size:12.5px}th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.stats{font-size:11px;color:#333;min-width:240px}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:#137a2a;font-weight:600}.fail{color:#b3161b;font-weight:600}.muted{color:#777}
tr.culprit td{background:#ffe3e0;font-weight:600}tr.diverges td{background:#fff6e5}
.verdict{border:2px solid #b3161b;background:#fff1f0;padding:10px 14px;border-radius:6px;margin:12px 0}
.verdict.ok{border-color:#137a2a;background:#effaf1}
code{background:#f4f4f4;padding:0 3px;border-radius:3px;font-size:12.5px}
.figs{display:flex;flex-wrap:wrap;gap:14px}.figs figure{margin:0}.figs figcaption{font-size:12px;color:#444}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px -2px 10px;border-radius:2px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return _e(x)


def _shape(meta: dict[str, Any]) -> str:
    shape = meta.get("shape")
    return "unknown" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _stats(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    rng = "no finite values" if s.get("min") is None else \
        f"min {_num(s['min'])} / max {_num(s['max'])} / mean {_num(s['mean'])}"
    bad = f"; <b>{s['nan']} NaN, {s['inf']} inf</b>" if s.get("nan") or s.get("inf") else ""
    return f"{_e(s['dtype'])}{_e(s['shape'])} {rng}{bad}"


def _table(head: Sequence[str], rows: Iterable[tuple[str, Sequence[str]]]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for cls, cells in rows:
        out.append(f'<tr class="{cls}">' + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _signature(data: dict[str, Any]) -> str:
    rows = [("", [f"<td>{_e(m['name'])}</td>", f"<td>{kind[:-1]}</td>", f"<td>{_e(_shape(m))}</td>",
                  f"<td>{_e(m['dtype'])}</td>"]) for kind in ("inputs", "outputs") for m in data.get(kind, [])]
    return "<h2>Signature</h2>" + _table(("tensor", "kind", "shape", "dtype"), rows)


def _passes(data: dict[str, Any]) -> str:
    passes = data.get("passes") or []
    if not passes:
        return ""
    culprit_pass = (data.get("culprit") or {}).get("pass")
    rows = []
    for p in passes:
        cls = "culprit" if p.get("changed_values") or (culprit_pass and p["name"] == culprit_pass) else ""
        cells = [f"<td>{_e(p['name'])}</td>", f"<td>{'yes' if p['modified'] else 'no'}</td>",
                 f"<td class=num>{p['seconds']:.3f}</td>"]
        if "summary" in p:
            cells.append(f"<td class=num>+{p.get('nodes_added', 0)} / -{p.get('nodes_removed', 0)}</td>")
            cells.append(f"<td>{_e(p['summary'])}</td>")
        cells.append(f"<td class=muted>{_e(p['reason'])}</td>")
        rows.append((cls, cells))
    head = ["pass", "modified", "seconds"] + (["nodes +/-", "values before vs after"] if "summary" in passes[0] else []) + ["why"]
    notes = "".join(f"<p class=muted>{_e(n)}</p>" for n in (data.get("pass_localization") or {}).get("notes", []))
    return "<h2>Passes</h2>" + notes + _table(head, rows)


def _comparisons(comparisons: Sequence[dict[str, Any]], skipped: str | None) -> str:
    out = ["<h2>Outputs compared</h2>"]
    if skipped:
        out.append(f"<p class=fail>validation skipped: {_e(skipped)}</p>")
    for comp in comparisons:
        verdict = '<span class="pass">PASS</span>' if comp["passed"] else '<span class="fail">FAIL</span>'
        out.append(f"<p><b>{_e(comp['candidate'])}</b> vs <b>{_e(comp['reference'])}</b>: {verdict}</p>")
        if comp.get("pinning"):  # the upstream tie proof: what was pinned, or why it did not explain the failure
            out.append(f"<p class=muted>pinning: {_e(comp['pinning'].get('text', ''))}</p>")
        if comp.get("selection_inputs"):  # every row the selections could pick (bridge.conversion.selection_inputs)
            out.append(f"<p class=muted>selection inputs: {_e(comp['selection_inputs'].get('text', ''))}</p>")
        rows = [("" if o["passed"] else "diverges",
                 [f"<td>{_e(o['name'])}</td>", f"<td>{'yes' if o['passed'] else '<b>NO</b>'}</td>",
                  f"<td>{_e(o.get('cand_shape'))}</td>", f"<td class=num>{_num(o.get('max_abs'))}</td>",
                  f"<td class=num>{_num(o.get('max_rel'))}</td>", f"<td class=num>{_num(o.get('mismatch_fraction'))}</td>",
                  f"<td>{_e(_note_and_tolerance(o))}</td>"]) for o in comp["outputs"]]
        out.append(_table(("output", "ok", "shape", "max abs", "max rel", "mismatch", "note"), rows))
    return "\n".join(out)


def _note_and_tolerance(o: dict[str, Any]) -> str:
    """An output's note and the elementwise tolerance that judged it (bridge.validation.tolerance)."""
    rule = o.get("tolerance_rule")
    return "; ".join(x for x in (o.get("note", ""), f"tolerance: {rule}" if rule else "") if x)


def _verdict(data: dict[str, Any]) -> str:
    c = data.get("culprit")
    if not c:
        ok = data.get("passed")
        text = "every compared tensor agrees" if ok else "the outputs differ but no single node could be blamed"
        return f'<div class="verdict{" ok" if ok else ""}" id="verdict">{_e(text)}</div>'
    attrs = ", ".join(f"{_e(k)}={_e(json.dumps(v) if not isinstance(v, str) else v)}" for k, v in c["attributes"].items())
    err = c["error"]
    inputs = "".join(f"<tr><td>{_e(i['tensor'])}</td><td>{_stats(i['reference'])}</td><td>{_stats(i['candidate'])}</td></tr>"
                     for i in c.get("inputs", []))
    onnx_node = c.get("onnx_node")
    return f"""<div class="verdict" id="culprit-verdict">
<p><b>Culprit:</b> node <code id="culprit-node">{_e(c['node'])}</code> (op <code>{_e(c['op'])}</code>),
output <code>{_e(c['tensor'])}</code>; {_e(c.get('made_by') or '')}</p>
<p>{_e(c['summary'])}</p>
<p>error: max abs {_num(err.get('max_abs'))}, max rel {_num(err.get('max_rel'))}, mismatch fraction
{_num(err.get('mismatch_fraction'))} {_e(err.get('note') or '')}</p>
<p>attributes: {attrs or '<span class=muted>none</span>'}</p>
{f"<p>ONNX node: <code>{_e(onnx_node['name'])}</code> ({_e(onnx_node['op'])})</p>" if onnx_node else ""}
<table><tr><th>tensor</th><th>reference</th><th>converted</th></tr>{inputs}
<tr class="culprit"><td>{_e(c['tensor'])} (output)</td><td>{_stats(c['reference'])}</td><td>{_stats(c['candidate'])}</td></tr></table>
</div>"""


def _divergence(data: dict[str, Any]) -> str:
    d = data.get("divergence")
    if not d:
        return ""
    rows = []
    for r in d["rows"][:MAX_TABLE_ROWS]:
        src = r.get("source_node")
        node = r.get("node")
        err = r["error"]
        cls = "culprit" if r["culprit"] else ("diverges" if r["diverges"] else "")
        rows.append((cls, [f"<td>{_e(r['tensor'])}" + (' <a id="culprit"></a>' if r["culprit"] else "") + "</td>",
                           f"<td>{_e(src['name'] + ' (' + src['op'] + ')') if src else '-'}</td>",
                           f"<td>{_e(node['name'] + ' (' + node['op'] + ')') if node else '-'}</td>",
                           f"<td>{'CULPRIT' if r['culprit'] else ('inherited' if r.get('propagated') else ('differs' if r['diverges'] else 'agrees'))}</td>",
                           f"<td class=num>{_num(err.get('max_abs'))}</td>", f"<td class=num>{_num(err.get('max_rel'))}</td>",
                           f"<td class=num>{_num(err.get('mismatch_fraction'))}</td>",
                           f"<td class=stats>{_stats(r['reference'])}</td>", f"<td class=stats>{_stats(r['candidate'])}</td>"]))
    more = f"<p class=muted>{len(d['rows']) - MAX_TABLE_ROWS} more rows in the JSON report</p>" \
        if len(d["rows"]) > MAX_TABLE_ROWS else ""
    notes = "".join(f"<p class=muted>{_e(n)}</p>" for n in d.get("notes", []))
    return (f"<h2>Divergence: {_e(d['reference'])} vs {_e(d['candidate'])}, tensor by tensor</h2>"
            f"<p>{_e(d['summary'])} ({d['compared']} tensors compared, {d['diverging']} differ; "
            f"{_e(data.get('granularity', ''))})</p>{notes}"
            + _table(("tensor", "source node", "ONNX node", "verdict", "max abs", "max rel", "mismatch",
                      "reference", "converted"), rows) + more)


def _histograms(data: dict[str, Any]) -> str:
    hists = data.get("histograms") or {}
    if not hists:
        return ""
    figs = []
    for name, h in hists.items():
        caption = f"{_e(name)}: {h['exact']} elements exact, {sum(h['counts'])} differ, {h['nonfinite']} non-finite"
        if images.available():
            figs.append(f"<figure>{_img(images.render_histogram(h['edges'], h['counts'], name), 'error histogram ' + name)}"
                        f"<figcaption>{caption}</figcaption></figure>")
        else:
            figs.append(f"<p>{caption}</p>")
    return "<h2>Per-element error of failing outputs</h2><div class=figs>" + "".join(figs) + "</div>"


def _overlays(overlays: Sequence[Overlay]) -> str:
    if not overlays:
        return ""
    if not images.available():
        return ("<h2>Detections</h2><p class=muted>overlays left out: Pillow is not installed ("
                + html.escape(install_command("report")) + ")</p>")
    legend = (f'<p class=legend>reference<span style="background:rgb{images.REFERENCE_COLOUR}"></span> '
              f'converted<span style="background:rgb{images.CANDIDATE_COLOUR}"></span> '
              f'dashed with a corner mark: no match on the other side<span style="background:rgb{images.UNMATCHED_COLOUR}"></span></p>')
    figs = []
    for o in overlays:
        unmatched = sum(not b.matched for b in o.reference) + sum(not b.matched for b in o.candidate)
        caption = (f"{_e(o.title)}: {len(o.reference)} reference, {len(o.candidate)} converted boxes, "
                   f"{unmatched} unmatched")
        figs.append(f'<figure class="overlay">{_img(images.render_overlay(o), o.title)}<figcaption>{caption}</figcaption></figure>')
    return "<h2>Detections</h2>" + legend + "<div class=figs>" + "".join(figs) + "</div>"


# --- dataset validation (issue 33) ---
def dataset_html(entries: dict[str, Any], run: dict[str, Any]) -> str:
    """Agreement and mAP per runtime, the budget's verdict, and the worst images with both sides' boxes."""
    from bridge.report.dataset import budget_text, dataset_columns, dataset_verdict

    budget = run.get("budget") or {}
    ok = run.get("passed", True) and not run.get("cancelled")
    out = [f'<h2 id="dataset">Dataset: <span class="{"pass" if ok else "fail"}">{_e(dataset_verdict(run))}</span></h2>',
           f"<p>{_e(run.get('input', ''))}; labels: {'yes' if run.get('labels') else 'none'}<br>"
           f"preprocessing: {_e((run.get('preprocessing') or {}).get('description', ''))}<br>"
           f"budget: {_e(budget_text(budget, '≥', '≤'))}</p>"]
    out += [f"<p class=muted>{_e(n)}</p>" for n in run.get("notes", [])]
    cols = dataset_columns(entries)
    rows = []
    for key, e in entries.items():
        name = f"source ({e.get('runtime')})" if key == "source" else key
        rows.append(("", [f"<td>{_e(name)}</td>", *(f"<td class=num>{_num(e.get(c))}</td>" for c in cols)]))
    out.append(_table(("runtime", *cols), rows))
    worst = run.get("worst") or []
    if worst:
        out.append("<h2>Largest disagreements with the source</h2>")
        out.append(_worst_images(worst, run.get("class_names") or {}))
    return "\n".join(out)


def _worst_images(worst: Sequence[dict[str, Any]], names: dict[str, str]) -> str:
    """Each image (read from its file) with the source's boxes and the candidate's, or a line without Pillow."""
    from bridge.report.images import Box

    figs = []
    for w in worst:
        caption = (f"{_e(w['runtime'])}: {_e(w['name'])}, disagreement {w['disagreement']:.3g}"
                   + (f" ({_e(w['note'])})" if w.get("note") else ""))
        image = _read_image(w.get("path")) if images.available() else None
        if image is None:
            figs.append(f"<p>{caption}</p>")
            continue

        def boxes(rows: Sequence[dict[str, Any]]) -> list[Box]:
            return [Box(r["box"][0], r["box"][1], r["box"][2], r["box"][3], r["label"],
                        r["score"] if r.get("score") is not None else 1.0, r["matched"]) for r in rows]

        overlay = Overlay(w["name"], image, boxes(w.get("source") or []), boxes(w.get("candidate") or []),
                          normalised=False)
        figs.append(f'<figure class="overlay">{_img(images.render_overlay(overlay), w["name"])}'
                    f"<figcaption>{caption}</figcaption></figure>")
    legend = (f'<p class=legend>source<span style="background:rgb{images.REFERENCE_COLOUR}"></span> '
              f'converted<span style="background:rgb{images.CANDIDATE_COLOUR}"></span> dashed: no match</p>'
              if images.available() else "")
    return legend + "<div class=figs>" + "".join(figs) + "</div>"


def _read_image(path: str | None) -> Any:
    if not path:
        return None
    try:
        import numpy as np
        from PIL import Image

        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except (OSError, ValueError):
        return None
# --- end dataset validation ---


# --- reduced precision (issue 34) ---
def precision_html(data: dict[str, Any]) -> str:
    """fp32 and the variant side by side, the speed-up, the fallback rounds and the per-layer costs."""
    from bridge.report.precision import cell, precision_verdict, side_columns, speed_line

    budget = data["settings"]["budget"]
    out = [f'<h2 id="precision">Precision {_e(data["precision"])} ({_e(data["target"])}): '
           f'<span class="{"pass" if data.get("passed") else "fail"}">{_e(precision_verdict(data))}</span></h2>',
           f"<p>budget ({_e(budget['origin'])}): agreement AP@0.5 with the source &ge; {_num(budget['min_agreement'])}, "
           f"mAP drop &le; {_num(budget['max_map_drop'])}<br>variant: {_e(data['destination'])}"
           + ("" if data.get("written") else " (not written)")
           + (f"<br>calibration: {_e(data['calibration'])}" if data.get("calibration") else "") + "</p>"]
    rows = data.get("side_by_side") or []
    cols = side_columns(rows)
    out.append(_table(cols, [("", [f"<td>{_e(cell(r, c))}</td>" for c in cols]) for r in rows]))
    line = speed_line(data)
    if line:
        out.append(f"<p>{_e(line)}</p>")
    rounds = data.get("rounds") or []
    if len(rounds) > 1 or (rounds and rounds[0].get("kept_float")):
        out.append(_table(("round", "kept float", "agreement_ap50", "map50", "verdict"), [
            ("", [f"<td>{r['round']}</td>", f"<td>{_e(', '.join(r['kept_float']) or '-')}</td>",
                  f"<td class=num>{_num((r.get('figures') or {}).get('agreement_ap50'))}</td>",
                  f"<td class=num>{_num((r.get('figures') or {}).get('map50'))}</td>",
                  f"<td>{'pass' if r['passed'] else _e('fail: ' + '; '.join(r['failures'] or [r.get('error') or '']))}</td>"])
            for r in rounds]))
    costs = data.get("layer_costs") or []
    if costs:
        out.append(f"<p>Per-layer cost ({_e(data.get('costs_measured_on') or '')}), most costly first:</p>")
        out.append(_table(("node", "op", "cost"), [("", [f"<td>{_e(c['node'])}</td>", f"<td>{_e(c['op'])}</td>",
                                                           f"<td class=num>{_num(c['cost'])}</td>"]) for c in costs[:10]]))
    build = (rounds[-1].get("build") if rounds else None) or {}
    notes = [*([f"method: {build['method']}"] if build.get("method") else []), *build.get("notes", []),
             *data.get("notes", [])]
    out += [f"<p class=muted>{_e(n)}</p>" for n in notes]
    return "\n".join(out)
# --- end reduced precision ---


def to_html(data: dict[str, Any], overlays: Sequence[Overlay] = ()) -> str:
    cmd = data.get("command", "bridge")
    title = f"bridge {cmd}: {data.get('source') or data.get('model') or ''}"
    verdict = '<span class="pass">PASS</span>' if data.get("passed") else '<span class="fail">FAIL</span>'
    meta = []
    for key in ("framework", "exporter", "opset", "reference"):
        if data.get(key) is not None:
            meta.append(f"{key}: <b>{_e(data[key])}</b>")
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{_e(title)}</h1><p>{verdict} &middot; " + " &middot; ".join(meta) + "</p>"]
    if cmd == "debug":
        parts.append(_verdict(data))
    if data.get("error"):  # a conversion that stopped with an error (recipe.failure_report)
        err = data["error"]
        rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v.get('status', '-'))}</td><td>{_e(v.get('reason') or '')}</td></tr>"
                       for k, v in (data.get("stages") or {}).items())
        parts.append(f'<p class="fail">{_e(err.get("type"))} (exit code {_e(err.get("exit_code"))}): '
                     f'{_e(err.get("message"))}</p><p>output {_e(data.get("output"))}: NOT written</p>'
                     f"<table><tr><th>stage</th><th>status</th><th>reason</th></tr>{rows}</table>")
    parts.append(_comparisons(data.get("validation") or data.get("comparisons") or [], data.get("validation_skipped")))
    sizes = data.get("validation_sizes") or data.get("sizes")
    if sizes:
        from bridge.report.sizes import sizes_text

        parts.append(f"<p>validated at: {_e(sizes_text(sizes))}</p>")
    if data.get("second_size_skipped"):
        from bridge.report.sizes import one_size_text

        parts.append(f'<p class="fail">{_e(one_size_text(data["second_size_skipped"]))}</p>')
    parts.append(_overlays(overlays))
    if data.get("dataset") is not None:  # --dataset (issue 33)
        parts.append(dataset_html(data["dataset"], data.get("dataset_run") or {}))
    if data.get("precision") is not None:  # --precision (issue 34)
        parts.append(precision_html(data["precision"]))
    parts.append(_histograms(data))
    parts.append(_divergence(data))
    parts.append(_passes(data))
    if data.get("inputs") and isinstance(data["inputs"], list):
        parts.append(_signature(data))
    for kind in ("notes", "warnings"):
        if data.get(kind):
            parts.append(f"<h2>{kind.title()}</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in data[kind]) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(p for p in parts if p)


def write_html(data: dict[str, Any], path: Path, overlays: Sequence[Overlay] = ()) -> None:
    atomic_write_text(Path(path), to_html(data, overlays))
