"""``--input`` with framework tensor names that hold colons (TF / TFLite ``serving_default_x:0``):
``NAME=SHAPE[:DTYPE]`` always, and ``NAME:SHAPE[:DTYPE]`` read from the right."""

from __future__ import annotations

import pytest

from bridge.config import InputSpec
from bridge.errors import UsageError


@pytest.mark.parametrize(("text", "name", "shape", "dtype"), [
    ("serving_default_x:0", "serving_default_x:0", None, "float32"),
    ("serving_default_x:0=1,224,224,3", "serving_default_x:0", (1, 224, 224, 3), "float32"),
    ("serving_default_x:0=1,4:int32", "serving_default_x:0", (1, 4), "int32"),
    ("serving_default_x:0:1,4", "serving_default_x:0", (1, 4), "float32"),
    ("serving_default_x:0:1,4:int64", "serving_default_x:0", (1, 4), "int64"),
    ("model/conv:0:2x3", "model/conv:0", (2, 3), "float32"),
    ("images=", "images", None, "float32"),
    ("images:4,3,64,64", "images", (4, 3, 64, 64), "float32"),
])
def test_names_with_colons(text: str, name: str, shape: tuple[int, ...] | None, dtype: str) -> None:
    spec = InputSpec.parse(text)
    assert (spec.name, spec.shape, spec.dtype) == (name, shape, dtype)


@pytest.mark.parametrize(("text", "says"), [
    ("serving_default_x:0=1,a", "comma-separated integers"),
    ("serving_default_x:0=0,4", "positive integer"),
    ("=1,4", "NAME=SHAPE"),
    ("x:0=1,4:complex", "unknown dtype"),
])
def test_bad_specs_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        InputSpec.parse(text)
