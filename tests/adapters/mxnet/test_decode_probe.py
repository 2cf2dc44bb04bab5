"""The decode-stage probe (bridge.conversion.decode_probe, adapters.mxnet.decode_probe) on the bundled trained SSD:
one folded anchor value shifted - which no detection on the sample images decodes from, so comparing outputs
cannot see it - FAILs naming the probe; the conversion itself passes with the probe stated (report JSON too); a
candidate without provenance says the probe did not run; the synthetic scores leave the sort no ties."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from support import REPO, mxnet_available

from bridge import api, provenance
from bridge.errors import ValidationMismatch

EXAMPLE = REPO / "examples" / "mxnet_ssd"
SYMBOL = EXAMPLE / "model-symbol.json"
FEEDS = EXAMPLE / "sample_inputs.npz"
NODE = "MultiBoxDetection 'detection'"

pytestmark = pytest.mark.skipif(not mxnet_available(), reason="mxnet not installed (pip install 'bridge[mxnet]')")


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("decode_probe")
    out, report = folder / "ssd.onnx", folder / "report.json"
    result = api.convert(str(SYMBOL), out, inputs=["data:4,3,64,64"], feeds=FEEDS, report=report)
    assert result.written
    return out, json.loads(report.read_text())


def _validate(model: Path) -> api.ValidateResult:
    return api.validate(str(model), source=str(SYMBOL), feeds=str(FEEDS), isolated=False)


def _anchor_constants(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """The float initializers the decode region reads (the folded anchor centres and extents), largest first."""
    region = {i for n in model.graph.node if (p := provenance.read(n)) and p.node == "detection" for i in n.input}
    found = [t for t in model.graph.initializer if t.name in region and t.data_type == onnx.TensorProto.FLOAT]
    return sorted(found, key=lambda t: -numpy_helper.to_array(t).size)


def test_conversion_passes_with_the_probe_stated(converted: tuple[Path, dict]) -> None:
    _, report = converted
    (comparison,) = [c for c in report["validation"] if c["candidate"] == "onnxruntime"]
    probed = [o for o in comparison["outputs"] if o.get("decode_probe")]
    assert probed, comparison["outputs"]
    probe = probed[0]["decode_probe"]
    assert probe["passed"] and probe["ran"] and probe["anchors_seen"] == probe["anchors"] == 320
    assert f"decode probe of {NODE}" in probed[0]["note"] and "rows agree" in probed[0]["note"]


@pytest.mark.parametrize("which", [0, 1], ids=["first-anchor-constant", "second-anchor-constant"])
def test_one_shifted_anchor_value_fails_naming_the_probe(converted: tuple[Path, dict], tmp_path: Path,
                                                         which: int) -> None:
    path, _ = converted
    model = onnx.load(path)
    constants = _anchor_constants(model)
    assert len(constants) >= 2, [t.name for t in constants]
    tensor = constants[which]
    values = numpy_helper.to_array(tensor).copy()
    flat = values.reshape(-1)
    flat[flat.size // 3] += 0.05  # one anchor's value: realistic feeds need not decode from it
    tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    mutant = tmp_path / "mutant.onnx"
    onnx.save(model, mutant)
    with pytest.raises(ValidationMismatch) as failed:
        _validate(mutant)
    text = str(failed.value)
    assert f"decode probe of {NODE}" in text and "differs by" in text and "anchors seen 320/320" in text, text


def test_without_provenance_the_probe_says_it_did_not_run(converted: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = converted
    model = onnx.load(path)
    assert provenance.strip(model) > 0
    bare = tmp_path / "bare.onnx"
    onnx.save(model, bare)
    result = _validate(bare)
    said = f"decode probe: not run (no nodes stand for {NODE})"
    assert said in result.warnings, result.warnings
    notes = [o.note for c in result.comparisons for o in c.outputs]
    assert any(said in n for n in notes), notes


def test_synthetic_scores_are_distinct_and_reach_every_anchor() -> None:
    from adapters.mxnet.decode_probe import kept_rows, rounds_needed, synthetic_round

    batch, anchors, topk = 2, 1000, 100
    rounds = rounds_needed(batch, anchors, topk)
    top: set[int] = set()
    for k in range(rounds):
        cls, loc, scores = synthetic_round(batch, 5, anchors, 0.01, k, topk)
        assert np.unique(scores).size == scores.size and scores.min() > 0.01
        assert np.array_equal(cls[:, 1:].max(axis=1), scores) and cls[:, 0].max() < 0.01
        assert loc.shape == (batch, 4 * anchors) and (k > 0 or not loc.any())
        for b in range(batch):
            top.update(np.argsort(-scores[b])[:kept_rows(anchors, topk)].tolist())
    assert top == set(range(anchors))


def test_only_decode_nodes_the_compared_outputs_depend_on_are_probed() -> None:
    from adapters.mxnet.decode_probe import decode_nodes

    assert decode_nodes(SYMBOL) == ["detection"]
    assert decode_nodes(SYMBOL, ["detection_output"]) == ["detection"]
    assert decode_nodes(SYMBOL, ["multibox_loc_pred", "multibox_cls_pred"]) == []  # cut before the decode
