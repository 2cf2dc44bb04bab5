""".tflite files as people ship them: sparse weights (DENSIFY) are densified for the export and validated against
the sparse original; a custom op is named as custom with the ``--outputs`` cut before it, and that cut converts
and validates; ``--outputs`` names that are not in the file are named; ``--dynamic`` on an axis the file fixes
gets advice a .tflite user can follow. The models are built in the test (blazeface_models)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from blazeface_models import custom_op_tflite, detector_tflite, sparse_tflite

import bridge
from adapters.tensorflow.tflite_file import DENSIFY, read
from bridge.errors import UnsupportedOpError, UsageError

pytest.importorskip("ai_edge_litert")


def _op_codes(path: Path) -> list[int]:
    model = read(path.read_bytes())
    return [max(int(model.operatorCodes[op.opcodeIndex].builtinCode or 0),
                int(model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode or 0)) for op in model.subgraphs[0].operators]


def test_sparse_weights_are_densified_and_validate_against_the_sparse_source(tmp_path: Path) -> None:
    source = sparse_tflite(tmp_path / "sparse.tflite")
    assert _op_codes(source).count(DENSIFY) == 2  # the converter stored both weights sparse
    result = bridge.convert(source, tmp_path / "sparse.onnx", validate=["onnxruntime"], isolated=False)
    assert result.passed and "sparse weights densified" in result.exporter
    assert result.validation[0].reference == "tflite"  # the interpreter ran the sparse original
    assert source.read_bytes() == (tmp_path / "sparse.tflite").read_bytes()  # the user's file is untouched


@pytest.fixture(scope="module")
def custom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return custom_op_tflite(tmp_path_factory.mktemp("custom") / "segmenter.tflite")


def test_a_custom_op_is_named_with_the_cut_before_it(custom: Path, tmp_path: Path) -> None:
    with pytest.raises(UnsupportedOpError) as err:
        bridge.convert(custom, tmp_path / "m.onnx", validate=[], isolated=False)
    text = str(err.value)
    assert "Erfinv x1" in text and "a custom op" in text and "CheckerPass" not in text
    cut = re.search(r"--outputs (\S+) \(bridge cuts segmenter.tflite there", text)
    assert cut is not None, text
    result = bridge.convert(custom, tmp_path / "cut.onnx", validate=["onnxruntime"], isolated=False,
                            options={"outputs": cut.group(1)})
    assert result.passed and [m.name for m in result.outputs] == cut.group(1).split(",")


def test_outputs_not_in_the_tflite_are_named(custom: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"outputs=\['nope'\]: segmenter\.tflite has no tensor of that name"):
        bridge.convert(custom, tmp_path / "m.onnx", validate=[], isolated=False, options={"outputs": "nope"})


def test_dynamic_on_an_axis_the_tflite_fixes_gets_tflite_advice(tmp_path: Path) -> None:
    source = detector_tflite(tmp_path / "face.tflite")
    with pytest.raises(UsageError) as err:
        bridge.convert(source, tmp_path / "m.onnx", dynamic=["input:0=batch"], validate=[], isolated=False)
    text = " ".join(str(err.value).split())
    assert "face.tflite fixes axis 0 of input 'input' to 1" in text and "A .tflite keeps the shapes" in text
    assert "Drop --dynamic" in text and "shape-generic" not in text
