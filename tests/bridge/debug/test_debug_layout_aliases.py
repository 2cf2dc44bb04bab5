"""``bridge debug --model FILE`` compares FILE's tensors with the source's, meeting at a moved Softmax through the
layout alias FILE's metadata records (``bridge.provenance.TENSOR_ALIASES_META``). That record is FILE's word, so
debug measures it against the source first - the same check validation's tie proof makes
(``bridge.validation.layout_aliases.check_claimed_aliases``): a true alias is used, a false one is not (it would
show a divergence at a correct tensor and blame an innocent node) and the warnings say so."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from bridge import api
from bridge.provenance import TENSOR_ALIASES_META, tensor_aliases

INPUTS = ["x:1,4,4"]


@pytest.fixture(scope="module")
def moved_softmax(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """x -> transpose -> SoftmaxActivation(channel) (cls_prob) -> transpose back -> sqrt, converted by bridge: the
    Softmax moves past the Transposes (which cancel), so MXNet's cls_prob_output is in the ONNX only transposed,
    as the moved Softmax's output (recorded as transpose(cls_prob_output, [0, 2, 1]))."""
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("MXNet is not installed (pip install 'bridge[mxnet]')")
    folder = tmp_path_factory.mktemp("moved_softmax")
    prob = mx.sym.SoftmaxActivation(mx.sym.transpose(mx.sym.var("x"), axes=(0, 2, 1)), mode="channel",
                                    name="cls_prob")
    mx.sym.sqrt(mx.sym.transpose(prob, axes=(0, 2, 1)), name="root").save(str(folder / "net-symbol.json"))
    mx.nd.save(str(folder / "net-0000.params"), {})
    out = folder / "out.onnx"
    assert api.convert(folder / "net-symbol.json", out, inputs=INPUTS, isolated=False).passed
    (moved,) = tensor_aliases({p.key: p.value for p in onnx.load(out).metadata_props}).items()
    assert moved[1] == {"of": "cls_prob_output", "perm": [0, 2, 1]}
    return folder / "net-symbol.json", out, moved[0]


def test_a_true_alias_is_compared(moved_softmax: tuple[Path, Path, str]) -> None:
    symbol, out, tensor = moved_softmax
    result = api.debug(symbol, model=out, inputs=INPUTS)
    row = result.divergence.row(tensor)
    assert row is not None and not row.diverges
    assert result.divergence.culprit is None
    assert not any("layout aliases not used" in w for w in result.warnings), result.warnings


@pytest.mark.parametrize(("of", "perm"), [("cls_prob_output", [0, 1, 2]), ("root_output", [0, 1, 2])],
                         ids=["wrong-axes", "another-tensor"])
def test_a_false_alias_in_the_file_is_not_used(of: str, perm: list[int], moved_softmax: tuple[Path, Path, str],
                                               tmp_path: Path) -> None:
    """The file's record claims the moved Softmax's output is another layout of cls_prob (or another tensor):
    served as claimed, that correct tensor would diverge and debug would blame the Softmax. It is not used."""
    symbol, out, tensor = moved_softmax
    model = onnx.load(out)
    entry = next(p for p in model.metadata_props if p.key == TENSOR_ALIASES_META)
    entry.value = json.dumps({tensor: {"of": of, "perm": perm}})
    tampered = tmp_path / "tampered.onnx"
    onnx.save(model, tampered)
    result = api.debug(symbol, model=tampered, inputs=INPUTS)
    assert result.divergence.row(tensor) is None
    assert result.divergence.culprit is None, result.divergence.culprit
    said = [w for w in result.warnings if "layout aliases not used" in w]
    assert said and f"{tensor} as transpose({of}, {perm}): its values are not the source's" in said[0], result.warnings
