"""The layout aliases a model claims, measured against the source before anything uses them.

A pass that moves a Transpose across a source tensor (a softmax over the channel axis moved to the last axis)
records the tensor it made as ``transpose(source tensor, perm)`` in the model's metadata
(``bridge.provenance.TENSOR_ALIASES_META``), so the tools comparing the model with its source per tensor can
still meet at that tensor: the upstream tie proof pins there (``bridge.validation.pinning``), ``bridge debug``
compares there (``bridge.conversion.sources.AliasedTaps``). The metadata is the model's word, and the model may
be the file under test: a false claim would make a tensor of the candidate's choice a pin, or show a divergence
(or an agreement) where there is none. So every claim is measured here, once for every tool: the candidate's
tensor must equal the source's tensor in the claimed axis order within the tolerance on the feeds given; a claim
that does not hold, or could not be measured, is not used and is said.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from bridge.config import Tolerance
from bridge.validation.graph import GraphIndex

Values = Callable[[Sequence[str]], Mapping[str, np.ndarray]]  # tensor names -> their values on the feeds


@dataclass
class CheckedAliases:
    """The claims that hold (candidate tensor -> (source tensor, perm)) and, for each that does not, why."""

    kept: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)

    def as_metadata(self) -> dict[str, dict[str, Any]]:
        """The kept aliases as the metadata spells them (``{tensor: {"of": ..., "perm": [...]}}``)."""
        return {t: {"of": of, "perm": list(perm)} for t, (of, perm) in self.kept.items()}

    def statement(self) -> str:
        """What the user is told about the claims not used ('' when every claim held)."""
        if not self.rejected:
            return ""
        return "the model's own layout aliases not used (their values are not the source's): " + "; ".join(self.rejected)


def check_claimed_aliases(model: onnx.ModelProto, claimed: Mapping[str, Mapping[str, Any]], source_names: set[str],
                          feeds: Mapping[str, np.ndarray], source_values: Values, candidate_values: Values,
                          tolerance: Tolerance, say: Callable[[str], None] = lambda _m: None) -> CheckedAliases:
    """The claims of ``claimed`` (tensor -> {of, perm}, as ``bridge.provenance.tensor_aliases`` reads them) that
    hold on ``feeds``: ``source_values`` gives the source's tensors (``source_names`` are those it has),
    ``candidate_values`` the model's computed tensors, both on ``feeds``. A tensor the source returns under its own
    name needs no alias (skipped, not rejected); a claim naming a tensor the source or the model does not have, or
    whose values are not the source's transposed as claimed, is rejected with why; when either side cannot be run
    every claim is rejected as not measured."""
    checked = CheckedAliases()
    index = GraphIndex(model)
    present = set(index.order) | set(index.inputs)
    wanted: dict[str, tuple[str, tuple[int, ...]]] = {}
    for tensor, entry in claimed.items():
        of, perm = str(entry.get("of", "")), tuple(int(p) for p in entry.get("perm", ()))
        if tensor in source_names:  # the source returns it by name: the claim adds nothing
            continue
        if of not in source_names or tensor not in present:
            checked.rejected.append(f"{tensor} as transpose({of}, {list(perm)}): "
                                    + ("the source has no tensor of that name" if of not in source_names
                                       else "no such tensor"))
            continue
        wanted[tensor] = (of, perm)
    if not wanted:
        return checked
    say(f"checking {len(wanted)} layout alias(es) the model records against the source")
    try:
        src = source_values(list(dict.fromkeys(of for of, _ in wanted.values())))
        computed = [t for t in wanted if t not in index.inputs]  # a graph input's value is what was fed
        cand = dict(candidate_values(computed)) if computed else {}
        cand.update({t: feeds[t] for t in wanted if t in index.inputs and t in feeds})
    except Exception as exc:  # unmeasured: not used
        checked.rejected.extend(f"{t} as transpose({of}, {list(perm)}): not measured ({exc})"
                                for t, (of, perm) in wanted.items())
        return checked
    for tensor, (of, perm) in wanted.items():
        if _holds(cand.get(tensor), src.get(of), perm, tolerance):
            checked.kept[tensor] = (of, perm)
        else:
            checked.rejected.append(f"{tensor} as transpose({of}, {list(perm)}): its values are not the source's")
    return checked


def _holds(mine: Any, theirs: Any, perm: tuple[int, ...], tolerance: Tolerance) -> bool:
    """``mine`` is ``theirs`` transposed by ``perm`` within the tolerance (NaN where both are NaN)."""
    if mine is None or theirs is None:
        return False
    theirs, mine = np.asarray(theirs), np.asarray(mine)
    if len(perm) != theirs.ndim or sorted(perm) != list(range(theirs.ndim)):
        return False
    moved = np.transpose(theirs, perm)
    with np.errstate(all="ignore"):
        return moved.shape == mine.shape and bool(np.allclose(moved, mine, atol=tolerance.atol, rtol=tolerance.rtol,
                                                              equal_nan=True))
