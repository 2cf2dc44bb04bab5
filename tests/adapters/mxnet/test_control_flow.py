"""ops_control.py: MXNet's control-flow ops with their subgraphs, converted to ONNX Scan, against MXNet."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import Model, export, need_mxnet, run_mxnet, run_onnx


def _cumsum(mx: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """One data input, one state; the body's output is the new state (a running sum)."""
    def step(x: Any, states: list[Any]) -> Any:
        s = states[0] + x * 2
        return s, [s]
    outs, states = mx.sym.contrib.foreach(step, mx.sym.var("data"), [mx.sym.var("init")])
    return mx.sym.Group([outs, *states]), {}


def _rnn_cell(mx: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """An Elman cell over a sequence: a weight read from outside the body (a free variable), two outputs."""
    w = mx.sym.var("w")

    def step(x: Any, states: list[Any]) -> Any:
        h = mx.sym.tanh(mx.sym.FullyConnected(x, w, num_hidden=4, no_bias=True, name="fc") + states[0])
        return [h, mx.sym.sum(h, axis=1)], [h]
    outs, states = mx.sym.contrib.foreach(step, mx.sym.var("data"), [mx.sym.var("init")])
    rng = np.random.default_rng(7)
    return mx.sym.Group([*outs, *states]), {"arg:w": rng.standard_normal((4, 3)).astype(np.float32)}


def _two_data_two_states(mx: Any) -> tuple[Any, dict[str, np.ndarray]]:
    def step(xs: list[Any], states: list[Any]) -> Any:
        a, b = xs
        s0, s1 = states
        return [a * b + s1], [s0 + a, s1 * 0.5 + b]
    outs, states = mx.sym.contrib.foreach(step, [mx.sym.var("data"), mx.sym.var("data2")],
                                          [mx.sym.var("init"), mx.sym.var("init2")])
    return mx.sym.Group([*outs, *states]), {}


CASES: dict[str, tuple[Callable[[Any], tuple[Any, dict[str, np.ndarray]]], dict[str, tuple[int, ...]]]] = {
    "cumsum": (_cumsum, {"data": (5, 3), "init": (3,)}),
    "rnn_cell_free_variable": (_rnn_cell, {"data": (6, 2, 3), "init": (2, 4)}),
    "two_data_two_states": (_two_data_two_states, {"data": (4, 2), "data2": (4, 2), "init": (2,), "init2": (2,)}),
}


# the control-flow translators these parity tests cover (read by the every-translator-has-a-case check)
COVERED_OPS = ("_foreach", "_cond", "_while_loop")


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("case", list(CASES))
def test_foreach_matches_mxnet(case: str, opset: int, tmp_path: Path) -> None:
    mx = need_mxnet()
    build, shapes = CASES[case]
    sym, params = build(mx)
    sym.save(str(tmp_path / "net-symbol.json"))
    params_path = None
    if params:
        params_path = tmp_path / "net-0000.params"
        mx.nd.save(str(params_path), {k: mx.nd.array(v) for k, v in params.items()})
    rng = np.random.default_rng(3)
    model = Model(tmp_path / "net-symbol.json", params_path,
                  {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()})
    result = export(model, opset)
    assert any(n.op_type == "Scan" for n in result.model.graph.node)
    got, ref = run_onnx(result.model, model.feeds), run_mxnet(model, result)
    assert list(ref) == list(result.output_names)
    for name, value in ref.items():
        assert got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_cond_takes_the_branch_mxnet_takes(sign: float, opset: int, tmp_path: Path) -> None:
    mx = need_mxnet()
    a, b = mx.sym.var("a"), mx.sym.var("b")
    out = mx.sym.contrib.cond(mx.sym.sum(a) > 0, lambda: [a * b + 1, a * 2], lambda: [a - b, b * 3])
    mx.sym.Group(list(out)).save(str(tmp_path / "net-symbol.json"))
    rng = np.random.default_rng(5)
    feeds = {"a": (sign * np.abs(rng.standard_normal((2, 3)))).astype(np.float32),
             "b": rng.standard_normal((2, 3)).astype(np.float32)}
    model = Model(tmp_path / "net-symbol.json", None, feeds)
    result = export(model, opset)
    assert any(n.op_type == "If" for n in result.model.graph.node)
    got, ref = run_onnx(result.model, feeds), run_mxnet(model, result)
    assert list(ref) == list(result.output_names) and len(ref) == 2
    for name, value in ref.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("start", [0.0, 3.0, 4.0], ids=["5_steps", "2_steps", "1_step"])
def test_while_loop_runs_as_many_steps_as_mxnet(start: float, opset: int, tmp_path: Path) -> None:
    """A dynamic trip count (the condition reads a loop variable), a free variable in the body, outputs
    stacked to max_iterations rows: the rows MXNet wrote and the final loop variables match. (A loop that
    runs no step cannot be a case: MXNet 1.9.1 itself fails on it, "Shape is unknown".)"""
    mx = need_mxnet()
    i, s, w = mx.sym.var("i"), mx.sym.var("s"), mx.sym.var("w")
    outs, final = mx.sym.contrib.while_loop(
        cond=lambda i, s: i < 5, func=lambda i, s: ([s * w], [i + 1, s + mx.sym.broadcast_mul(i, w)]),
        loop_vars=[i, s], max_iterations=8)
    mx.sym.Group([*outs, *final]).save(str(tmp_path / "net-symbol.json"))
    feeds = {"i": np.asarray([start], np.float32), "s": np.asarray([1.0, -2.0], np.float32),
             "w": np.asarray([0.5, 3.0], np.float32)}
    model = Model(tmp_path / "net-symbol.json", None, feeds)
    result = export(model, opset)
    assert any(n.op_type == "Loop" for n in result.model.graph.node)
    got, ref = run_onnx(result.model, feeds), run_mxnet(model, result)
    assert list(ref) == list(result.output_names) and len(ref) == 3
    steps = int(max(5 - start, 0))
    stacked, *loop_vars = ref
    assert got[stacked].shape == ref[stacked].shape == (8, 2)
    np.testing.assert_allclose(got[stacked][:steps], ref[stacked][:steps], rtol=1e-6)
    np.testing.assert_array_equal(got[stacked][steps:], 0)
    for name in loop_vars:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, err_msg=name)
