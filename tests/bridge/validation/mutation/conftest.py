"""Session fixtures of the mutation suite: each base model converted by bridge once (and required to PASS its own
validation), its outputs on the equivalence inputs computed once; the score table printed at the end."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import mutation_score  # noqa: E402
from mutation_bases import ConvertedBase, convert_base  # noqa: E402
from mutation_models import PROVIDERS  # noqa: E402


@pytest.fixture(scope="session")
def mutants_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where bases and mutants are written (``BRIDGE_MUTANTS_DIR`` keeps them, with the sources and feeds the
    reproduce commands name, for re-running a verdict by hand)."""
    given = os.environ.get("BRIDGE_MUTANTS_DIR")
    folder = Path(given) if given else tmp_path_factory.mktemp("mutants")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def converted_bases(mutants_dir: Path) -> Callable[[str], ConvertedBase]:
    """name -> the base model converted by bridge (once per session)."""
    cache: dict[str, ConvertedBase] = {}

    def get(name: str) -> ConvertedBase:
        if name not in cache:
            folder = mutants_dir / "bases" / name
            folder.mkdir(parents=True, exist_ok=True)
            cache[name] = convert_base(PROVIDERS[name], folder)
        return cache[name]

    return get


@pytest.fixture(scope="session", autouse=True)
def _report(mutants_dir: Path) -> Iterator[None]:
    yield
    if mutation_score.RECORDS:
        target = Path(os.environ.get("BRIDGE_MUTATION_REPORT", mutants_dir / "mutation-report.json"))
        mutation_score.write(mutation_score.RECORDS, target)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if mutation_score.RECORDS:
        terminalreporter.section("mutation score")
        terminalreporter.write_line(mutation_score.table(mutation_score.RECORDS))
