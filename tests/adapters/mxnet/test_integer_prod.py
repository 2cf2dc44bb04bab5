"""MXNet ``prod`` over integers wraps on overflow (modulo 2**bits, as C++ integer multiplication does);
onnxruntime's int64 ReduceProd does not (it gives INT64_MAX where MXNet gives 0). The translation multiplies
rows pairwise with Mul, which wraps: equal to MXNet bit for bit, overflowing or not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mxnet_testlib import assert_same_as_mxnet, export, need_mxnet, run_mxnet, run_onnx, save_symbol


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("axis", [None, (0, 1), (2,), (-1, 0), (1,)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("high", [3, 100])  # products in range / far past it
def test_integer_prod_wraps_like_mxnet(tmp_path: Path, dtype: str, axis: tuple[int, ...] | None, keepdims: bool,
                                       high: int) -> None:
    mx = need_mxnet()
    kwargs = {"keepdims": keepdims, **({"axis": axis} if axis is not None else {})}
    sym = mx.sym.prod(mx.sym.var("data", dtype=dtype), name="p", **kwargs)
    x = np.random.default_rng(4).integers(1, high, (4, 5, 7)).astype(dtype)
    model = save_symbol(mx, sym, tmp_path, {}, {"data": x})
    result = export(model)
    expected = run_mxnet(model, result)
    if high == 100 and dtype == "int64" and axis is None:
        assert expected["p_output"].tolist() == [np.prod(x)]  # numpy wraps too: the case overflows for real
    assert_same_as_mxnet(run_onnx(result.model, model.feeds), expected, rtol=0, atol=0)
