"""TensorFlow ``--outputs`` says what the outputs are called, and the source options each kind of TF source reads:

* a cut point given as a node name (``Identity``) comes back as the tensor ``Identity:0``: a note names both, so
  the next command (--tolerance, --detections, bridge validate) uses the name that exists;
* ``--outputs``/``--inputs`` (GraphDef only) and ``--signature`` (SavedModel only) given for another kind are
  refused naming the option and the kind, not ignored;
* ``--output-names`` renames TF outputs through the shared ``adapters.base.rename_outputs``."""

from __future__ import annotations

from pathlib import Path

import pytest

import bridge
from adapters.tensorflow.adapter import cut_name_notes
from bridge.errors import UsageError


@pytest.mark.parametrize(("asked", "outputs", "noted"), [
    ("act", ["act:0"], ["act -> act:0"]),
    ("act:0", ["act:0"], []),
    ("a, b:0,c", ["a:0", "b:0", "c:0"], ["a -> a:0", "c -> c:0"]),
    ("", ["a:0"], []),
    ("a", ["a"], []),  # kept as given: nothing to say
])
def test_cut_name_notes(asked: str, outputs: list[str], noted: list[str]) -> None:
    notes = cut_name_notes(asked, outputs)
    if not noted:
        assert notes == []
    else:
        (note,) = notes
        assert note.startswith("--outputs:") and all(n in note for n in noted) and "--output-names" in note


def test_a_graph_def_cut_by_node_name_notes_the_tensor_name(tf_sources: dict[str, Path], tmp_path: Path) -> None:
    result = bridge.convert(tf_sources["graph_def"], tmp_path / "g.onnx", inputs=["boxes:20,4", "scores:20"],
                            options={"inputs": "boxes,scores", "outputs": "Identity,Identity_1:0"},
                            validate=["onnxruntime"])
    assert [m.name for m in result.outputs] == ["Identity:0", "Identity_1:0"]
    (note,) = [n for n in result.notes if n.startswith("--outputs")]
    assert "Identity -> Identity:0" in note and "Identity_1" not in note


def test_a_graph_def_output_renamed(tf_sources: dict[str, Path], tmp_path: Path) -> None:
    result = bridge.convert(tf_sources["graph_def"], tmp_path / "g.onnx", inputs=["boxes:20,4", "scores:20"],
                            options={"inputs": "boxes,scores", "outputs": "Identity"}, output_names=["keep"],
                            validate=["onnxruntime"])
    assert result.passed and [m.name for m in result.outputs] == ["keep"]
    assert not [n for n in result.notes if n.startswith("--outputs")]  # the name the user chose is the name


@pytest.mark.parametrize(("kind", "options", "words"), [
    # said in the API's keywords: the Python caller's words for --outputs, --signature, --inputs
    ("keras", {"outputs": "up"}, "outputs=['up']: "),
    ("keras", {"signature": "serving_default"}, "signature='serving_default': "),
    ("graph_def", {"signature": "serving_default"}, "signature='serving_default': "),
    ("saved_model", {"graph_inputs": "boxes"}, "graph_inputs='boxes': "),
    ("saved_model", {"outputs": "Identity"}, "outputs=['Identity']: "),
])
def test_an_option_this_kind_does_not_read_is_refused(tf_sources: dict[str, Path], tmp_path: Path, kind: str,
                                                      options: dict[str, str], words: str) -> None:
    with pytest.raises(UsageError) as err:
        bridge.convert(tf_sources[kind], tmp_path / "m.onnx", options=options, validate=[], isolated=False)
    assert str(err.value).startswith(words) and str(tf_sources[kind]) in str(err.value) and "only" in str(err.value)
