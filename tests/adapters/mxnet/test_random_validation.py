"""A model with random ops validates end to end: its random outputs are compared by shape and dtype only
(both sides sample their own values) and the report says so; its deterministic outputs are still exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from mxnet_testlib import need_mxnet, save_symbol

import bridge


def test_random_outputs_are_compared_by_shape_and_dtype(tmp_path: Path) -> None:
    mx = need_mxnet()
    data = mx.sym.var("data")
    noise = mx.sym.random_uniform(low=0.0, high=1.0, shape=(2, 3), name="noise")
    doubled = mx.sym.elemwise_mul(data, mx.sym.ones_like(data) * 2, name="doubled")
    model = save_symbol(mx, mx.sym.Group([doubled, noise]), tmp_path, {}, {"data": np.ones((2, 3), np.float32)})
    result = bridge.convert(str(model.symbol), tmp_path / "m.onnx", inputs=["data:2,3"])
    assert result.passed and result.written
    by_name = {o.name: o for c in result.validation for o in c.outputs}
    random_out = next(o for name, o in by_name.items() if "noise" in name)
    exact_out = next(o for name, o in by_name.items() if "doubled" in name)
    assert "compared by shape and dtype only" in random_out.note and random_out.passed
    assert exact_out.max_abs == 0.0 and "shape and dtype" not in exact_out.note
