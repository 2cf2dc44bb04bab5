"""Users drive the CLI: ``bridge validate MUTANT --source SOURCE --feeds FEEDS`` exits 1 on wrong candidates (and
0 on the correctly converted base), in its default isolated child processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from mutation_bases import ConvertedBase
from mutation_operators import mutants
from support import mxnet_available, run_cli

pytestmark = pytest.mark.skipif(not mxnet_available(), reason="MXNet not installed (the bundled SSD's reference)")

# (operator, words in the site) of mutants of the bundled SSD every validation must FAIL
WRONG = [("anchor_scale", "x1.01"), ("class_id_plus_one", "class id + 1"), ("rows", "top-ranked box moved")]


def _validate(model: Path, converted: ConvertedBase) -> tuple[int, str]:
    proc = run_cli("validate", str(model), "--source", converted.built.source, "--feeds", str(converted.built.feeds))
    return proc.returncode, proc.stdout + proc.stderr


def test_the_base_passes_on_the_cli(converted_bases: Callable[[str], ConvertedBase]) -> None:
    converted = converted_bases("mxnet_ssd")
    code, text = _validate(converted.path, converted)
    assert code == 0, text


@pytest.mark.parametrize(("op", "site"), WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_candidate_exits_1(op: str, site: str, converted_bases: Callable[[str], ConvertedBase],
                                   tmp_path: Path) -> None:
    converted = converted_bases("mxnet_ssd")
    mutant = next(m for m in mutants(converted.base, op) if site in m.site)
    path = tmp_path / f"{op}.onnx"
    onnx.save(mutant.model, path)
    code, text = _validate(path, converted)
    assert code == 1, f"{mutant.site}: exit {code}\n{text[-2000:]}"
    assert "FAIL" in text or "mismatch" in text.lower(), text[-2000:]
