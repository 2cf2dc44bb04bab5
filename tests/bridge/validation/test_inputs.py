"""Seeded input generation: reproducible, dtype-aware, dynamic dims varied away from the export sample."""

import numpy as np
import pytest

from bridge.config import InputSpec
from bridge.errors import UsageError
from bridge.runtimes.base import TensorMeta
from bridge.validation.inputs import make_inputs, other_size


@pytest.mark.parametrize(("axis", "sample", "expected"), [(0, 4, 5), (0, 1, 2), (2, 64, 128), (2, 96, 128), (3, 100, 104)])
def test_other_size_differs_and_keeps_divisibility(axis: int, sample: int, expected: int) -> None:
    assert other_size(axis, sample) == expected


def test_same_seed_same_data_and_dtypes() -> None:
    metas = [TensorMeta("x", (2, 3), "float32"), TensorMeta("ids", (2,), "int64"), TensorMeta("m", (2,), "bool")]
    a = make_inputs(metas, seed=7)
    b = make_inputs(metas, seed=7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert {k: v.dtype.name for k, v in a.items()} == {"x": "float32", "ids": "int64", "m": "bool"}
    assert not np.array_equal(a["x"], make_inputs(metas, seed=8)["x"])


def test_dynamic_dims_take_other_sizes_static_dims_stay() -> None:
    metas = [TensorMeta("images", ("batch", 3, "height", 64), "float32")]
    feeds = make_inputs(metas, [InputSpec("images", (4, 3, 32, 64))])
    assert feeds["images"].shape == (5, 3, 64, 64)
    feeds = make_inputs(metas, [InputSpec("images", (4, 3, 32, 64))], vary_dynamic=False)
    assert feeds["images"].shape == (4, 3, 32, 64)


def test_symbolic_dim_without_sample_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--input images"):
        make_inputs([TensorMeta("images", ("batch", 3), "float32")])
