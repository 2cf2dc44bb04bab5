"""The mutation score: every judged mutant recorded, and the table printed at the end of the session.

score = killed / non-equivalent mutants, per operator and per model; *unproved*: the default verdict PASSes but says
it proves little (the feeds were thin: ``bridge.validation.coverage``) and ``--strict`` FAILs it - counted apart
from killed, never as killed; the survivors named (their verdict and
the command reproducing it), the equivalent mutants listed with why, and the operators that found no site.
The records are also written as JSON (``BRIDGE_MUTATION_REPORT`` or ``mutation-report.json`` in the mutants'
folder) for reports that compare runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Record:
    model: str
    layout: str
    operator: str
    site: str
    status: str  # "killed" | "unproved" | "survived" | "equivalent" | "no site"
    detail: str  # the FAIL's reason, the PASS's comparison, why equivalent, or why no site
    strict: str = ""  # for a survivor: whether --strict stops it
    command: str = ""  # the CLI command reproducing the verdict
    on_feeds: str = ""  # for a survivor: how the mutant differs from the base on the validation feeds themselves

    @property
    def counted(self) -> bool:
        return self.status in ("killed", "unproved", "survived")


RECORDS: list[Record] = []


def record(rec: Record) -> None:
    RECORDS.append(rec)


def mechanism(r: Record) -> str:
    """What let a survivor through, read from its verdict: the file's own metadata trusted, pinning, a tie rule or
    the scale rule excusing the difference, the candidate judged on one input, feeds on which the bug does not
    show, or a difference on the feeds within the tolerance."""
    if r.operator.startswith("metadata_"):
        return "metadata trusted (the file under test decides how it is judged)"
    if r.on_feeds.startswith("identical"):  # whatever excuse the verdict shows is about the base's own differences
        if r.operator == "constant_outputs":
            return "one input only (a constant candidate matches on the sample it was folded from)"
        return "thin feeds (the mutant computes what the base computes on the validation feeds)"
    if "pinned" in r.detail:
        return "pinning (the source's values replaced the candidate's at selection inputs)"
    if "tie-ambiguous" in r.detail:
        return "tie rule (moved or changed rows excused as near-ties)"
    if "only by their scale" in r.detail:
        return "scale rule (elements excused by the scale of the slices they lie in)"
    return "tolerance (the mutant differs on the feeds, within the tolerance)"


def _score(recs: list[Record]) -> str:
    counted = [r for r in recs if r.counted]
    killed = sum(r.status == "killed" for r in counted)
    unproved = sum(r.status == "unproved" for r in counted)
    eq = sum(r.status == "equivalent" for r in recs)
    pct = f"{100 * killed / len(counted):.0f}%" if counted else "-"
    return (f"{killed}/{len(counted)} killed ({pct})" + (f", {unproved} unproved (thin feeds said, --strict FAILs)"
                                                         if unproved else "") + f", {eq} equivalent")


def table(records: list[Record]) -> str:
    mutants = [r for r in records if r.status != "no site"]
    if not mutants:
        return "mutation score: no mutants judged"
    counted = [r for r in mutants if r.counted]
    lines = [f"mutation score: {_score(mutants)} - {len(mutants)} mutants of "
             f"{len({r.model for r in mutants})} models in {len({r.layout for r in mutants})} layouts"]
    for key in ("operator", "model"):
        groups: dict[str, list[Record]] = defaultdict(list)
        for r in mutants:
            groups[getattr(r, key)].append(r)
        lines.append(f"  per {key}:")
        lines += [f"    {name:<28} {_score(recs)}" for name, recs in sorted(groups.items())]
    survivors = [r for r in counted if r.status == "survived"]
    if survivors:
        kinds: dict[str, int] = defaultdict(int)
        for r in survivors:
            kinds[mechanism(r).split(" (")[0]] += 1
        lines.append("  survivors by mechanism: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
        lines.append(f"  survivors ({len(survivors)}):")
        for r in survivors:
            lines.append(f"    {r.model} / {r.operator}: {r.site}")
            lines.append(f"      mechanism: {mechanism(r)}; on the feeds: {r.on_feeds}")
            lines.append(f"      PASS: {r.detail[:300]}")
            lines.append(f"      --strict: {r.strict}; reproduce: {r.command}")
    unproved = [r for r in counted if r.status == "unproved"]
    if unproved:
        lines.append(f"  unproved ({len(unproved)}): PASS said to prove little, --strict FAILs")
        for r in unproved:
            lines.append(f"    {r.model} / {r.operator}: {r.site}; on the feeds: {r.on_feeds}")
    equivalent = [r for r in mutants if r.status == "equivalent"]
    if equivalent:
        lines.append(f"  equivalent ({len(equivalent)}):")
        lines += [f"    {r.model} / {r.operator}: {r.site} - {r.detail}" for r in equivalent]
    none = [r for r in records if r.status == "no site"]
    if none:
        lines.append(f"  no site ({len(none)}):")
        lines += [f"    {r.model} / {r.operator}: {r.detail}" for r in none]
    return "\n".join(lines)


def write(records: list[Record], path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(r) for r in records], indent=1))
    tmp.replace(path)
