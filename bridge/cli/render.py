"""How every ``bridge`` command shows progress and results: one console pair, one progress display,
one comparison table, one JSON printer.

Progress is a spinner naming the current stage (and how long it has run) on a terminal, and plain
log lines (at ``-v``) when piped, plus a "still ..." line on stderr every ``HEARTBEAT_S`` seconds
of a long stage (a 90 s export must not look hung). Comparison tables become one line per output
when piped (a table squeezed to 80 columns folds names and notes into slivers).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from rich.markup import escape
from rich.table import Table

from bridge.cli.safe_console import SafeConsole
from bridge.progress import HEARTBEAT_S, Progress

out = SafeConsole()
err = SafeConsole(stderr=True)


def sizes_text(sizes: list[dict[str, Any]]) -> str:
    """Every size validated at (``bridge.report.sizes_text``), markup-escaped."""
    from bridge.report.sizes import sizes_text as text

    return escape(text(sizes))


def print_sizes(sizes: list[dict[str, Any]], second_size_skipped: str | None) -> None:
    """``validated at: ...`` and, for a model with dynamic axes checked at one size only, the line saying so."""
    from bridge.report.sizes import one_size_text

    out.print("validated at: " + sizes_text(sizes))
    if second_size_skipped:
        text = one_size_text(second_size_skipped)
        head, _, rest = text.partition(": ")
        out.print(f"[bold yellow]{escape(head)}:[/bold yellow] {escape(rest)}", soft_wrap=True)


@contextlib.contextmanager
def progress(what: str, logger: str = "bridge.cli", heartbeat: float = HEARTBEAT_S) -> Iterator[Callable[[str], None]]:
    """A spinner with the current stage on a terminal; stage lines on stderr at -v otherwise; either way
    a long stage says it is still running every ``heartbeat`` seconds (``bridge.progress``: written to the
    stderr of now, so a framework capturing ``sys.stderr`` during an export does not swallow it). Any layer
    reaches it through ``bridge.progress.stage``."""
    log = logging.getLogger(logger)
    stream = err.file  # resolved now, before any exporter swaps sys.stderr
    console = SafeConsole(file=stream, force_terminal=err.is_terminal, width=err.width)
    with contextlib.ExitStack() as stack:
        status = stack.enter_context(console.status(what)) if console.is_terminal else None

        def on_stage(msg: str) -> None:
            if status is not None:
                status.update(f"{what}: {escape(msg)}")
            else:
                log.info("%s: %s", what, msg)

        def on_beat(line: str) -> None:
            if status is not None:
                status.update(escape(line))
            else:
                console.print(line, highlight=False, markup=False, soft_wrap=True)

        yield stack.enter_context(Progress(what, heartbeat=heartbeat, stream=stream, on_stage=on_stage,
                                           on_beat=on_beat))


def hint(text: str) -> None:
    """A next step after a failure, on stderr (the error line follows it)."""
    err.print(f"[cyan]hint:[/cyan] {escape(text)}", highlight=False)


def print_json(result: Any) -> None:
    """A result object (anything with ``to_dict()``) as JSON on stdout."""
    out.print_json(json.dumps(result.to_dict(), default=str))


def print_comparisons(comparisons: list[Any]) -> None:
    """One table per candidate runtime: every output's verdict and error figures."""
    for comp in comparisons:
        verdict = "PASS" if comp.passed else "FAIL"
        if getattr(comp, "vacuous", False):
            verdict += " [yellow](vacuous: " + escape("; ".join(comp.vacuous_reasons)) + ")[/yellow]"
        title = f"{escape(comp.candidate)} vs {escape(comp.reference)}: {verdict}"
        if getattr(comp, "pinning", None):  # the upstream tie proof: what was pinned, or why it did not explain
            title += "\n  pinning: " + escape(comp.pinning.get("text", ""))
        if getattr(comp, "selection_inputs", None):  # every row the selections could pick, against the source
            title += "\n  selection inputs: " + escape(comp.selection_inputs.get("text", ""))
        if not out.is_terminal:  # piped: one line per output, never folded into columns
            out.print(title, soft_wrap=True)
            for o in comp.outputs:
                figures = " ".join(f"{k} {v:.3g}" for k, v in (("max_abs", o.max_abs), ("max_rel", o.max_rel),
                                                              ("mismatch", o.mismatch_fraction)) if v is not None)
                out.print(f"  {escape(o.name)}: {'ok' if o.passed else '[red]NO[/red]'} shape {o.cand_shape} {figures}"
                          + (f" - {escape(o.note)}" if o.note else "") + _tolerance_text(o), soft_wrap=True)
            continue
        table = Table(title=title, title_justify="left")
        for col in ("output", "ok", "shape", "max abs", "max rel", "mismatch", "note"):
            table.add_column(col, overflow="fold", no_wrap=col in ("ok", "max abs", "max rel", "mismatch"))
        for o in comp.outputs:
            table.add_row(escape(o.name), "yes" if o.passed else "[red]NO[/red]", str(o.cand_shape),
                          f"{o.max_abs:.3g}" if o.max_abs is not None else "-",
                          f"{o.max_rel:.3g}" if o.max_rel is not None else "-",
                          f"{o.mismatch_fraction:.3g}" if o.mismatch_fraction is not None else "-",
                          escape(o.note) + _tolerance_text(o))
        out.print(table)


def print_dataset(dataset: Any) -> None:
    """``--dataset``: what ran on what, one line per runtime (agreement, mAP) and the accuracy budget's verdict."""
    if dataset is None:
        return
    from bridge.report.dataset import budget_text

    info = dataset.run_dict()
    budget = info["budget"]
    out.print(f"dataset: {escape(info['input'])}" + (f"; labels {escape(str(dataset.spec.labels))}" if info["labels"]
                                                      else "; no labels"), soft_wrap=True)
    out.print(f"  preprocessing: {escape(info['preprocessing']['description'])}", soft_wrap=True)
    out.print(f"  budget: {escape(budget_text(budget))}", soft_wrap=True)
    for key, entry in dataset.to_dict().items():
        figures = " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} -" for k, v in entry.items()
                           if k in _DATASET_FIGURES)
        counts = (f" ({entry['matched']} matched, {entry['missed']} missed, {entry['extra']} extra)"
                  if "matched" in entry else "")
        rate = f", {entry['images_per_s']:g} images/s" if entry.get("images_per_s") else ""
        name = f"source {entry['runtime']}" if key == "source" else key
        out.print(f"  {escape(name)}: {figures or 'no figures'}{counts}{rate}", soft_wrap=True)
    for note in info["notes"]:
        out.print(f"  [yellow]note:[/yellow] {escape(note)}", soft_wrap=True)
    if info["cancelled"]:
        c = info["cancelled"]
        out.print(f"[yellow]dataset: CANCELLED in the {escape(c['runtime'])} run after {c['images']} of {c['of']} "
                  "images[/yellow]")
    elif info["failures"]:
        out.print("[red]dataset: FAIL[/red] - " + escape("; ".join(info["failures"])), soft_wrap=True)
    else:
        out.print("[green]dataset: PASS[/green]")


def print_precision(precision: Any) -> None:
    """``--precision``: fp32 and the variant side by side, the speed-up, what the fallback kept float, the verdict."""
    if precision is None:
        return
    from bridge.report.precision import cell, precision_verdict, side_columns, speed_line

    data = precision.to_dict()
    budget = data["settings"]["budget"]
    out.print(f"precision {data['precision']} ({escape(data['target'])}, judged in {escape(data['runtime'])} on the "
              f"dataset): budget agreement >= {budget['min_agreement']:g}, mAP drop <= {budget['max_map_drop']:g} "
              f"({escape(budget['origin'])})", soft_wrap=True)
    if data.get("calibration"):
        out.print(f"  calibration: {escape(data['calibration'])}", soft_wrap=True)
    rows = data["side_by_side"]
    cols = [c for c in side_columns(rows) if c not in ("precision", "runtime")]
    for row in rows:
        out.print(f"  {escape(row['precision'])}: " + ", ".join(f"{c} {escape(cell(row, c))}" for c in cols),
                  soft_wrap=True)
    line = speed_line(data)
    if line:
        out.print(f"  {escape(line)}", soft_wrap=True)
    for r in data["rounds"][1:]:
        f = r.get("figures") or {}
        out.print(f"  fallback round {r['round']}: kept float {escape(', '.join(r['kept_float']))}: agreement_ap50 "
                  f"{cell(f, 'agreement_ap50')}, map50 {cell(f, 'map50')} - {'pass' if r['passed'] else 'fail'}",
                  soft_wrap=True)
    if data["layer_costs"] and not data["passed"]:
        worst = ", ".join(f"{c['node']} {c['cost']:.3g}" for c in data["layer_costs"][:5])
        out.print(f"  worst layers (cost): {escape(worst)}", soft_wrap=True)
    verdict = precision_verdict(data)
    written = f" - {escape(data['destination'])} written" if data.get("written") else ""
    out.print(("[green]" if data["passed"] else "[red]") + f"precision: {escape(verdict)}"
              + ("[/green]" if data["passed"] else "[/red]") + written, soft_wrap=True)


_DATASET_FIGURES = ("agreement_ap50", "agreement_ap50_95", "keypoint_pck", "keypoint_error", "top1_agreement",
                    "top5_agreement", "miou", "map50", "map50_95", "top1_accuracy", "top5_accuracy")


def _tolerance_text(o: Any) -> str:
    """`` [tolerance: ...]``: which elementwise tolerance judged an output and why (bridge.validation.tolerance)."""
    rule = getattr(o, "tolerance_rule", "")
    return escape(f" [tolerance: {rule}]") if rule else ""


def print_summaries(comparisons: list[Any]) -> None:
    """One line per candidate runtime (for commands where the table would say too much)."""
    for c in comparisons:
        colour = "green" if c.passed else "red"
        out.print(f"[{colour}]{escape(c.summary())}[/{colour}]")


def print_node_types(nodes: list[Any]) -> None:
    """``inspect --nodes``: one row per node with its inferred input/output types and, for models bridge
    wrote, where the node comes from (source node and op, the translator or pass that made it); rows where
    inference loses a dim or the rank although every input was known are marked (the first one is where
    dynamic-axis and "Expected shape" problems begin)."""
    with_provenance = any(getattr(n, "provenance", None) for n in nodes)
    columns = ["#", "node", "op", *(["source", "made by"] if with_provenance else []), "inputs", "outputs", "inference"]
    table = Table(title="inferred types and shapes", title_justify="left")
    for col in columns:  # folded, never cut with an ellipsis, when a terminal is narrower than a name
        table.add_column(col, overflow="fold")
    for n in nodes:
        ins = ", ".join(f"{i.name}: {i.describe()}" for i in n.inputs)
        outs = ", ".join(f"{o.name}: {o.describe()}" for o in n.outputs)
        origin: list[str] = []
        if with_provenance:
            p = n.provenance or {}
            source = f"{p.get('node', '')} ({p.get('op', '')})" if p.get("node") else "-"
            made = p.get("made_by", "") or "-"
            if p.get("rewritten_by"):
                made += f"; rewritten by {', '.join(p['rewritten_by'])}"
            origin = [escape(source), escape(made)]
        table.add_row(str(n.index), escape(n.name), escape(n.op), *origin, escape(ins), escape(outs),
                      f"[red]{escape(n.loses)}[/red]" if n.loses else "")
    out.print(table)
    lost = [n for n in nodes if n.loses]
    if lost:
        out.print(f"[yellow]inference first loses a dim at node '{escape(lost[0].name)}' ({escape(lost[0].op)})[/yellow]"
                  f" ({len(lost)} node(s) in all)")
    else:
        out.print("inference keeps every dim of every node whose inputs are known")
