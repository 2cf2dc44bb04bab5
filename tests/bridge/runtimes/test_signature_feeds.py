"""signature_feeds: the feed mapping shared by runtimes whose artefact renames inputs (SavedModel, .tflite)."""

from __future__ import annotations

import numpy as np
import pytest

from bridge.errors import UsageError
from bridge.runtimes.base import signature_feeds


def test_feeds_are_keyed_by_the_signature_names() -> None:
    x = np.ones(2, np.float32)
    assert signature_feeds({"x:0": x}, {"x:0": "x"}, ["x"], "SavedModel signature 's'") == {"x": x}


@pytest.mark.parametrize(("feeds", "message"), [
    ({"typo": np.ones(1)}, "feed 'typo' is not an input of the .tflite signature 'serve' (inputs: x, y)"),
    ({"x": np.ones(1)}, "no feed for .tflite input(s) ['y']"),
])
def test_unknown_and_missing_feeds_are_named(feeds: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(UsageError) as err:
        signature_feeds(feeds, {}, ["x", "y"], ".tflite signature 'serve'")
    assert message in str(err.value)
