"""``bridge.bench.run`` with recording fake runtimes (in-process, registered for the test): the rounds
interleave the runners in rotating order, a batch sweep feeds each size, ``--feeds`` rows are taken or
repeated, a fixed batch (exit 2) and a runtime that is not installed (exit 4) are refused, each named."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from support import make_model

from bridge.bench.run import BenchResult, BenchSettings, Cell, Runner, run_bench
from bridge.bench.timing import Latency
from bridge.cli.main import main
from bridge.config import Source
from bridge.errors import AdapterUnavailableError, InferenceError, RuntimeLoadError, UsageError
from bridge.runtimes import _REGISTRY
from bridge.runtimes.base import TensorMeta

LOG: list[tuple[str, tuple[int, ...]]] = []


class _Recording:
    name = "?"

    def __init__(self, model: Any) -> None:
        self.model = onnx.load(str(model))

    def activate(self) -> None:
        pass

    def deactivate(self) -> None:
        pass

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta.from_value_info(vi) for vi in self.model.graph.input]

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        LOG.append((self.name, feeds["x"].shape))
        return {"y": np.maximum(feeds["x"], 0)}


class FakeA(_Recording):
    name = "fake_a"


class FakeB(_Recording):
    name = "fake_b"


class Broken(_Recording):
    """Loads fine but fails at batch 3 (e.g. a runtime without a dynamic-batch kernel)."""

    name = "broken"

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if feeds["x"].shape[0] == 3:
            raise InferenceError("broken", "broken cannot run batch 3")
        return super().infer(feeds)


class Unloadable(_Recording):
    name = "unloadable"

    def activate(self) -> None:
        raise RuntimeLoadError("unloadable could not load the model: no kernel for Relu")


@pytest.fixture(autouse=True)
def fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "ghost_runtime.py").write_text("import framework_that_is_not_installed_here  # noqa\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_REGISTRY, "entries", {"fake_a": f"{__name__}:FakeA", "fake_b": f"{__name__}:FakeB",
                                               "ghost": "ghost_runtime:GhostRuntime",
                                               "broken": f"{__name__}:Broken", "unloadable": f"{__name__}:Unloadable"})
    LOG.clear()


def relu_model(path: Path, batch: int | str = "N") -> Path:
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 3])],
                         [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, 3])]), path)
    return path


def test_each_batch_is_staged_warmed_then_timed_in_rotating_rounds(tmp_path: Path) -> None:
    result = run_bench(relu_model(tmp_path / "m.onnx"), runtimes=["fake_a", "fake_b"],
                       settings=BenchSettings(batches=(1, 3), iterations=4, rounds=2, warmup=1, isolated=False))
    a, b = "fake_a", "fake_b"
    per_batch = [a, a, b, b,  # first run + one warm-up call each
                 a, a, b, b,  # round 1: a then b, two calls each
                 b, b, a, a]  # round 2: the order rotated
    assert [name for name, _ in LOG] == per_batch * 2
    assert [shape for _, shape in LOG] == [(1, 3)] * 12 + [(3, 3)] * 12
    assert result.inputs == {1: {"x": [1, 3]}, 3: {"x": [3, 3]}}
    for cell in result.cells:
        assert cell.latency is not None and len(cell.latency.samples) == 4 and cell.rounds == [2, 2]
        assert cell.first_run_s is not None and cell.peak_rss is None  # in-process: no per-runner memory
    assert any("in-process" in n for n in result.notes)


def test_feeds_rows_are_taken_or_repeated_to_each_batch_size(tmp_path: Path) -> None:
    rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "f.npz", x=rows)
    run_bench(relu_model(tmp_path / "m.onnx"), runtimes=["fake_a"], feeds=tmp_path / "f.npz",
              settings=BenchSettings(batches=(1, 3), iterations=1, rounds=1, warmup=0, isolated=False))
    assert [shape for _, shape in LOG] == [(1, 3), (1, 3), (3, 3), (3, 3)]
    result = run_bench(relu_model(tmp_path / "m.onnx"), runtimes=["fake_a"], feeds=tmp_path / "f.npz",
                       settings=BenchSettings(batches=(), iterations=1, rounds=1, warmup=0, isolated=False))
    assert result.settings.batches == (2,)  # a dynamic batch without --batch: the rows of --feeds


def test_a_batch_size_the_model_fixes_otherwise_is_refused_naming_the_input(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"input 'x' has a fixed batch of 2.*--dynamic x:0=batch"):
        run_bench(relu_model(tmp_path / "m.onnx", batch=2), runtimes=["fake_a"],
                  settings=BenchSettings(batches=(1,), isolated=False))
    assert LOG == []  # refused before anything ran
    result = run_bench(relu_model(tmp_path / "m.onnx", batch=2), runtimes=["fake_a"],
                       settings=BenchSettings(batches=(), iterations=2, rounds=1, isolated=False))
    assert result.settings.batches == (2,)  # default: the model's own batch


def test_a_named_runtime_that_is_not_installed_is_refused_with_exit_4(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Not installed here: exit 4, as in every command (an unknown name is a usage error, 2)."""
    model = relu_model(tmp_path / "m.onnx")
    with pytest.raises(AdapterUnavailableError, match=r"ghost is not installed.*framework_that_is_not_installed_here") \
            as info:
        run_bench(model, runtimes=["fake_a", "ghost"], settings=BenchSettings(batches=(1,), isolated=False))
    assert info.value.exit_code == 4
    assert main(["bench", str(model), "--runtime", "ghost", "--no-isolate"]) == 4
    assert "ghost" in capsys.readouterr().err
    assert main(["bench", str(model), "--runtime", "nosuch"]) == 2
    assert "unknown runtime" in capsys.readouterr().err


def test_by_default_runtimes_that_are_not_installed_are_left_out_with_the_reason(tmp_path: Path) -> None:
    result = run_bench(relu_model(tmp_path / "m.onnx"),
                       settings=BenchSettings(batches=(1,), iterations=2, rounds=1, isolated=False))
    assert {c.runner for c in result.cells if c.latency is not None} == {"fake_a", "fake_b", "broken"}
    ghost = next(r for r in result.runners if r.name == "ghost")
    assert ghost.error is not None and "not installed" in ghost.error
    assert any(n.startswith("ghost left out") for n in result.notes)


def test_with_a_time_budget_each_round_runs_calls_until_its_share_has_passed(tmp_path: Path) -> None:
    result = run_bench(relu_model(tmp_path / "m.onnx"), runtimes=["fake_a", "fake_b"],
                       settings=BenchSettings(batches=(2,), iterations=None, seconds=0.02, rounds=2, warmup=0,
                                              isolated=False))
    for cell in result.cells:
        # a call of the fake takes microseconds: a 10 ms share of a round holds many, every one timed
        assert cell.latency is not None and len(cell.rounds) == 2 and all(n > 5 for n in cell.rounds)
        assert len(cell.latency.samples) == sum(cell.rounds)
    assert result.settings.iterations is None and result.settings.seconds == 0.02


def test_a_runtime_that_fails_is_reported_and_the_others_still_run(tmp_path: Path) -> None:
    result = run_bench(relu_model(tmp_path / "m.onnx"), runtimes=["unloadable", "broken", "fake_a"],
                       settings=BenchSettings(batches=(1, 3), iterations=2, rounds=1, warmup=0, isolated=False))
    unloadable = next(r for r in result.runners if r.name == "unloadable")
    assert unloadable.error is not None and "no kernel for Relu" in unloadable.error
    assert result.cell("unloadable", 1) is None  # never loaded: no cells
    broken1, broken3 = result.cell("broken", 1), result.cell("broken", 3)
    assert broken1 is not None and broken1.latency is not None
    assert broken3 is not None and broken3.latency is None and "cannot run batch 3" in (broken3.error or "")
    assert all(result.cell("fake_a", b).latency is not None for b in (1, 3))  # type: ignore[union-attr]


def test_the_api_refuses_contradictory_or_unwritable_requests_before_running(tmp_path: Path) -> None:
    from bridge import api

    model = relu_model(tmp_path / "m.onnx")
    with pytest.raises(UsageError, match=r"give --iterations or --time, not both.*\(from Python: --iterations is "
                                         r"iterations=, --time is seconds=\)"):  # the API's keywords named too
        api.bench(model, runtime="fake_a", iterations=3, seconds=1.0)
    with pytest.raises(UsageError, match=r"\.json, \.md or \.html"):
        api.bench(model, runtime="fake_a", report=tmp_path / "r.txt")
    with pytest.raises(UsageError, match="positive"):
        api.bench(model, runtime="fake_a", batch=[0])
    assert LOG == []


def test_a_source_framework_named_like_a_runtime_is_a_runner_of_its_own(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_REGISTRY.entries, "onnx", f"{__name__}:FakeA")  # the ONNX adapter's framework name
    model = relu_model(tmp_path / "m.onnx")
    result = run_bench(model, source=Source(location=str(model)), runtimes=["onnx"],
                       settings=BenchSettings(batches=(2,), iterations=2, rounds=1, warmup=0, isolated=False))
    assert [(r.name, r.kind) for r in result.runners] == [("onnx (source)", "source"), ("onnx", "runtime")]
    assert result.source_runner == "onnx (source)" and result.ratio("onnx", 2) is not None


def test_bridge_bench_is_the_api_function_although_a_subpackage_has_its_name() -> None:
    import bridge
    import bridge.bench.report  # importing the subpackage must not rebind bridge.bench
    from bridge import api

    assert bridge.bench is api.bench


def test_ratios_are_source_median_over_runtime_median() -> None:
    def cell(name: str, ms: list[float]) -> Cell:
        return Cell(name, 4, latency=Latency(tuple(m / 1e3 for m in ms)))

    result = BenchResult("m.onnx", "src", BenchSettings(batches=(4,)), [Runner("mxnet", "source"),
                                                                          Runner("onnxruntime", "runtime")],
                         [cell("mxnet", [9, 10, 11, 300]), cell("onnxruntime", [2, 2.5, 3, 1])], {})
    assert result.ratio("onnxruntime", 4) == pytest.approx(10.5 / 2.25)
    assert result.ratio("mxnet", 4) is None and result.ratio("onnxruntime", 1) is None
    assert result.to_dict()["ratios_vs_source"] == {"onnxruntime@4": pytest.approx(10.5 / 2.25)}


@pytest.mark.parametrize(("settings", "words", "api_words"), [
    ({"iterations": 0}, "--iterations 0: at least 1", "iterations=0: at least 1"),
    ({"iterations": -2}, "--iterations -2", "iterations=-2"),
    ({"seconds": float("nan")}, "--time nan: must be a positive number", "seconds=nan: must be a positive number"),
    ({"seconds": float("inf")}, "--time inf: must be a positive number", "seconds=inf: must be a positive number"),
    ({"seconds": 0.0}, "--time 0.0", "seconds=0.0"),
    ({"seconds": 1e308}, "--time 1e\\+308: at most 86400 s", "seconds=1e\\+308: at most 86400 s"),
    ({"rounds": 0}, "--rounds 0", "rounds=0"), ({"warmup": -1}, "--warmup -1", "warmup=-1"),
    ({"threads": 0}, "--threads 0", "threads=0"),
])
def test_settings_that_measure_nothing_or_never_end_are_refused_before_any_runner(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], settings: dict[str, Any], words: str,
        api_words: str) -> None:
    from bridge import api

    model = relu_model(tmp_path / "m.onnx")
    with pytest.raises(UsageError, match=api_words):  # a Python caller reads its keywords
        api.bench(model, runtime="fake_a", isolated=False, **settings)
    assert LOG == []
    with pytest.raises(UsageError, match=words):  # the settings type itself, whoever builds one
        BenchSettings(batches=(1,), **settings)
    flags = {"iterations": "--iterations", "seconds": "--time", "rounds": "--rounds", "warmup": "--warmup",
             "threads": "--threads"}
    argv = [a for k, v in settings.items() for a in (flags[k], str(v))]
    assert main(["bench", str(model), "--runtime", "fake_a", "--no-isolate", *argv]) == 2  # the CLI: its flags
    assert re.search(words, capsys.readouterr().err)


def test_a_bench_in_which_no_runtime_ran_the_model_fails_and_still_writes_its_report(tmp_path: Path) -> None:
    from bridge import api
    from bridge.bench.run import BenchFailedError

    model = relu_model(tmp_path / "m.onnx")
    report = tmp_path / "r.json"
    with pytest.raises(BenchFailedError, match=r"no runtime ran .*m\.onnx: unloadable: .*no kernel for Relu; "
                                               r"broken at batch 3: .*cannot run batch 3") as err:
        api.bench(model, runtime=["unloadable", "broken"], batch=[3], iterations=2, rounds=1, warmup=0,
                  isolated=False, report=report)
    assert err.value.exit_code == 3 and err.value.result is not None and not err.value.result.measured
    assert report.is_file() and "no kernel for Relu" in report.read_text()
    assert main(["bench", str(model), "--runtime", "unloadable", "--no-isolate", "--iterations", "2"]) == 3
    # one runtime that ran the model is a result: the other's failure is in it
    result = api.bench(model, runtime=["unloadable", "fake_a"], iterations=2, rounds=1, warmup=0, isolated=False)
    assert result.measured and result.cell("fake_a", 1).latency is not None  # type: ignore[union-attr]
