"""The BRIDGE_TEST_BREAK test hooks: parsing, and that every breakage is undone on exit."""

from __future__ import annotations

import pytest

from bridge.debug.breakage import Breakage, broken, parse
from bridge.errors import UsageError


@pytest.mark.parametrize(("text", "expected"), [
    ("translator:SoftmaxActivation", [Breakage("translator", "SoftmaxActivation", None, 1.5)]),
    ("lowering:MultiBoxDetection.variances*3", [Breakage("lowering", "MultiBoxDetection", "variances", 3.0)]),
    ("pass:FoldConstantsPass*1.1; translator:Convolution*2",
     [Breakage("pass", "FoldConstantsPass", None, 1.1), Breakage("translator", "Convolution", None, 2.0)]),
])
def test_parse(text: str, expected: list[Breakage]) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize("text", ["nonsense", "lowering:MultiBoxDetection", "translator:Conv*x"])
def test_parse_rejects_bad_specs(text: str) -> None:
    with pytest.raises(UsageError):
        parse(text)


@pytest.mark.parametrize("text", ["translator:NoSuchOp", "lowering:NoSuchOp.x", "pass:NoSuchPass"])
def test_unknown_targets_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError), broken(text):
        pass


def test_breakages_are_undone() -> None:
    from adapters.mxnet.convert import TRANSLATORS
    from bridge.passes.cleanup import FoldConstantsPass
    from bridge.passes.contrib import LowerMultiBoxDetectionPass

    before = (TRANSLATORS["SoftmaxActivation"], LowerMultiBoxDetectionPass.lower, FoldConstantsPass.call)
    with broken("translator:SoftmaxActivation;lowering:MultiBoxDetection.variances;pass:FoldConstantsPass"):
        during = (TRANSLATORS["SoftmaxActivation"], LowerMultiBoxDetectionPass.lower, FoldConstantsPass.call)
        assert all(a is not b for a, b in zip(before, during, strict=True))
    after = (TRANSLATORS["SoftmaxActivation"], LowerMultiBoxDetectionPass.lower, FoldConstantsPass.call)
    assert after == before
