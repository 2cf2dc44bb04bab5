"""The decode-stage probe (bridge.conversion.decode_probe, adapters.mxnet.decode_probe) on the bundled trained SSD:
one folded anchor value shifted - which no detection on the sample images decodes from, so comparing outputs
cannot see it - FAILs naming the probe; the conversion itself passes with the probe stated (report JSON too); a
probe that should have run and did not (no region by provenance, the MXNet side or the region failed) is said in
the verdict and fails --strict; rows past nms_topk are compared by class only (MXNet defines nothing else there),
rows within it whole; the synthetic scores leave the sort no ties."""

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


def _validate(model: Path, strict: bool = False) -> api.ValidateResult:
    return api.validate(str(model), source=str(SYMBOL), feeds=str(FEEDS), isolated=False, strict=strict)


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


def _without_provenance(path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    model = onnx.load(path)
    assert provenance.strip(model) > 0
    bare = folder / "bare.onnx"
    onnx.save(model, bare)
    return bare


def _mxnet_side_raises(path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from bridge.errors import InferenceError

    def fails(*args: object, **kwargs: object) -> None:
        raise InferenceError("mxnet", "MultiBoxDetection refused the probe's inputs", node="detection")

    monkeypatch.setattr("adapters.mxnet.adapter.run_source_probe", fails)  # isolation off: the job runs here
    return path


def _region_crashes(path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from bridge.errors import RuntimeCrashedError

    def crashes(*args: object, **kwargs: object) -> None:
        raise RuntimeCrashedError("the decode probe's onnxruntime run crashed (signal 11)")

    monkeypatch.setattr("bridge.conversion.decode_probe.run_candidate_probe", crashes)
    return path


NOT_RUN = {  # why the probe did not run -> what the verdict must say
    "region-missing": (_without_provenance, f"decode probe: not run (no nodes stand for {NODE})"),
    "mxnet-side-raises": (_mxnet_side_raises, "decode probe: not run (the mxnet side failed: "),
    "region-crashes": (_region_crashes, "decode probe: not run (the candidate's decode region failed: "),
}


@pytest.mark.parametrize("why", list(NOT_RUN))
def test_a_probe_that_did_not_run_is_stated_and_fails_strict(converted: tuple[Path, dict], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    make, said = NOT_RUN[why]
    model = make(converted[0], tmp_path, monkeypatch)
    result = _validate(model)  # by default: PASS, the verdict line and the warnings say the probe did not run
    (comparison,) = [c for c in result.comparisons if c.candidate == "onnxruntime"]
    assert comparison.passed and comparison.vacuous, comparison.summary()
    assert said in comparison.summary() and any(said in w for w in result.warnings), (comparison.summary(),
                                                                                      result.warnings)
    with pytest.raises(ValidationMismatch) as failed:
        _validate(model, strict=True)
    assert said in str(failed.value), str(failed.value)


def test_convert_strict_refuses_to_write_when_the_probe_did_not_run(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _mxnet_side_raises(Path(), tmp_path, monkeypatch)
    out = tmp_path / "ssd.onnx"
    with pytest.raises(ValidationMismatch) as failed:
        api.convert(str(SYMBOL), out, inputs=["data:4,3,64,64"], feeds=FEEDS, strict=True, isolated=False)
    assert NOT_RUN["mxnet-side-raises"][1] in str(failed.value) and not out.exists(), str(failed.value)


def test_a_probe_that_ran_passes_strict(converted: tuple[Path, dict]) -> None:
    result = _validate(converted[0], strict=True)
    (comparison,) = [c for c in result.comparisons if c.candidate == "onnxruntime"]
    assert result.passed and not comparison.vacuous, comparison.summary()
    probed = [o.decode_probe for o in comparison.outputs if o.decode_probe]
    assert probed and probed[0]["ran"] and probed[0]["passed"], probed


def test_without_onnxruntime_the_probe_is_a_statement_only_for_a_source_with_a_decode_node(
        converted: tuple[Path, dict], tmp_path: Path) -> None:
    """Not applicable is not a failure: validated in openvino only, the SSD's verdict says the probe did not run
    (--strict still passes); a source without a decode node says nothing about it."""
    pytest.importorskip("openvino")
    from mxnet_testlib import save_symbol

    from adapters.mxnet.reference import import_mxnet

    said = "decode probe: not run (it is judged on the onnxruntime candidate, not among these)"
    result = api.validate(str(converted[0]), source=str(SYMBOL), feeds=str(FEEDS), isolated=False,
                          runtime=["openvino"], strict=True)
    assert result.passed and said in result.warnings, result.warnings
    mx = import_mxnet()
    plain = save_symbol(mx, mx.sym.relu(mx.sym.var("data"), name="act"), tmp_path, {}, {})
    relu = api.convert(str(plain.symbol), tmp_path / "relu.onnx", inputs=["data:2,8"], validate=["openvino"],
                       isolated=False, strict=True)
    assert relu.written and not any("decode probe" in w for w in relu.warnings), relu.warnings


def _rows_permuted(path: Path, folder: Path, order: list[int]) -> Path:
    """The candidate with its detection rows reordered by ``order`` inside the decode region (a Gather stamped as
    part of MultiBoxDetection 'detection'): another lowering's row layout."""
    model = onnx.load(path)
    (out,) = [o.name for o in model.graph.output]
    (last,) = [n for n in model.graph.node if out in n.output]
    last.output[list(last.output).index(out)] = f"{out}_unordered"
    gather = onnx.helper.make_node("Gather", [f"{out}_unordered", "probe_test_order"], [out], axis=1,
                                   name="detection/reorder")
    provenance.write(gather, provenance.read(last) or provenance.Provenance("mxnet", "detection"))
    model.graph.node.append(gather)
    model.graph.initializer.append(numpy_helper.from_array(np.array(order, np.int64), "probe_test_order"))
    mutant = folder / "reordered.onnx"
    onnx.save(model, mutant)
    return mutant


TOPK, ANCHORS = 100, 320  # the example's nms_topk and its anchors at 64x64


def _swap(i: int, j: int) -> list[int]:
    order = list(range(ANCHORS))
    order[i], order[j] = order[j], order[i]
    return order


def test_rows_past_nms_topk_in_another_order_pass(converted: tuple[Path, dict], tmp_path: Path) -> None:
    """MXNet defines only class -1 past its nms_topk rows (CPU: the valid rows at those positions in anchor
    order; GPU: the sorted rest): a lowering that leaves them in another order is correct."""
    order = [*range(TOPK), *reversed(range(TOPK, ANCHORS))]
    result = _validate(_rows_permuted(converted[0], tmp_path, order), strict=True)
    (comparison,) = [c for c in result.comparisons if c.candidate == "onnxruntime"]
    probed = [o.decode_probe for o in comparison.outputs if o.decode_probe]
    assert result.passed and probed and probed[0]["passed"], comparison.summary()
    assert probed[0]["rows_compared_whole"] == TOPK and probed[0]["rows_compared_by_class"] == ANCHORS - TOPK
    assert f"rows past the first {TOPK} (nms_topk): class only" in probed[0]["text"]


@pytest.mark.parametrize("order", [_swap(0, 1), _swap(TOPK - 1, TOPK), _swap(TOPK // 2, ANCHORS - 1)],
                         ids=["two-best-rows-swapped", "last-kept-row-swapped-with-the-next",
                              "a-kept-row-swapped-with-the-last"])
def test_rows_within_nms_topk_out_of_place_fail(converted: tuple[Path, dict], tmp_path: Path,
                                                order: list[int]) -> None:
    with pytest.raises(ValidationMismatch) as failed:
        _validate(_rows_permuted(converted[0], tmp_path, order))
    text = str(failed.value)
    assert f"decode probe of {NODE}" in text and "differs by" in text, text


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


def test_an_nms_topk_off_by_one_inside_the_region_fails(converted: tuple[Path, dict], tmp_path: Path) -> None:
    """Judging rows past nms_topk by class only still sees a lowering that keeps one row too few: row
    nms_topk - 1 gets class -1 where MXNet keeps a detection."""
    model = onnx.load(converted[0])
    (topk,) = [n for n in model.graph.node if n.op_type == "TopK" and (p := provenance.read(n)) and p.node == "detection"]
    index = list(model.graph.node).index(topk)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray([1], np.int64), "probe_test_one"))
    fewer = onnx.helper.make_node("Sub", [topk.input[1], "probe_test_one"], ["probe_test_k"], name="detection/fewer")
    provenance.write(fewer, provenance.read(topk) or provenance.Provenance("mxnet", "detection"))
    model.graph.node[index].input[1] = "probe_test_k"
    model.graph.node.insert(index, fewer)
    mutant = tmp_path / "topk_minus_one.onnx"
    onnx.save(model, mutant)
    with pytest.raises(ValidationMismatch) as failed:
        _validate(mutant)
    text = str(failed.value)
    assert f"decode probe of {NODE}" in text and f"row {TOPK - 1} (" in text and "(class)" in text, text


@pytest.mark.parametrize(("nms_threshold", "kept"), [(0.5, 3), (0.0, 8)], ids=["nms-on", "nms-off"])
def test_rows_past_nms_topk_hold_class_minus_one_only_with_nms_on(nms_threshold: float, kept: int) -> None:
    """What the comparison past nms_topk rests on, from MXNet itself: with NMS on, every row after the first
    nms_topk has class -1; with NMS off (nms_threshold outside (0, 1]) MXNet neither sorts nor cuts, so every row
    is defined and compared whole (``kept`` is all of them)."""
    from adapters.mxnet.decode_probe import ROLES, _rounds
    from adapters.mxnet.reference import import_mxnet

    mx = import_mxnet()
    rng = np.random.default_rng(0)
    corners = rng.random((1, 8, 4), dtype=np.float32)
    anchor = np.concatenate([np.minimum(corners[..., :2], corners[..., 2:]),
                             np.maximum(corners[..., :2], corners[..., 2:])], axis=-1)
    det = mx.sym.contrib.MultiBoxDetection(*(mx.sym.var(r) for r in ROLES), nms_topk=3, nms_threshold=nms_threshold,
                                           name="det")
    internals = {"cls_prob": np.zeros((2, 3, 8), np.float32), "loc_pred": np.zeros((2, 32), np.float32),
                 "anchor": anchor}
    probe = _rounds(mx, det, "det", internals)
    assert probe.kept == kept
    for rows in probe.rows:
        assert (rows[:, :kept, 0] >= 0).all() and (rows[:, kept:, 0] == -1).all(), rows[..., 0]
