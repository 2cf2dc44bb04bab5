"""``convert``'s upstream tie proof (bridge.conversion.pinning): a conversion that differs from its source only by a
few ulps on the scores before a top-N cut fails without pinning and passes with it, the note in every report
format; wrong after the cut it still fails; a target's own artefact gets the same proof (wrong after the cut there,
it still fails); a passing conversion does no pinning work. Sources: an ONNX file and an MXNet symbol (sigmoid -> topk -> take)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from pinning_models import BOXES, LOGITS, PEAK_LOGITS, break_a_box, nudge_peak, nudge_scores, topk_model

from bridge import api
from bridge.errors import ValidationMismatch
from bridge.model import ModelContainer


def _onnx_source(tmp: Path) -> tuple[Path, dict[str, Any], str]:
    onnx.save(topk_model(), tmp / "net.onnx")
    return tmp / "net.onnx", {}, "det_boxes"


def _mxnet_source(tmp: Path) -> tuple[Path, dict[str, Any], str]:
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("MXNet is not installed (pip install 'bridge[mxnet]')")
    scores = mx.sym.sigmoid(mx.sym.var("x"), name="scores")
    idx = mx.sym.topk(scores, axis=-1, k=3, ret_typ="indices", name="top")
    boxes = mx.sym.take(mx.sym.var("boxes"), mx.sym.reshape(idx, shape=(-1,)), axis=0, name="kept")
    boxes.save(str(tmp / "net-symbol.json"))
    mx.nd.save(str(tmp / "net-0000.params"), {})
    return tmp / "net-symbol.json", {"inputs": ["x:1,8", "boxes:8,4"]}, "kept_output"


SOURCES = {"onnx": _onnx_source, "mxnet": _mxnet_source}


def _feeds(tmp: Path) -> Path:
    np.savez(tmp / "feeds.npz", x=LOGITS, boxes=BOXES)
    return tmp / "feeds.npz"


def _edit(monkeypatch: pytest.MonkeyPatch, delta: float, broken: str | None = None) -> None:
    """The converted model nudged by ``delta`` before the cut (and, with ``broken``, wrong after it)."""
    to_proto = ModelContainer.to_proto

    def edited(self: ModelContainer, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        proto = to_proto(self, *args, **kwargs)
        nudge_scores(proto, delta)
        if broken:
            break_a_box(proto, broken)
        return proto

    monkeypatch.setattr(ModelContainer, "to_proto", edited)


@pytest.mark.parametrize("framework", ["onnx", "mxnet"])
def test_a_tie_at_the_cut_fails_unpinned_and_passes_pinned(framework: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    source, extra, boxes = SOURCES[framework](tmp_path)
    _edit(monkeypatch, 5e-7)
    with monkeypatch.context() as m:  # the same conversion without the proof: the swap at the cut fails it
        m.setattr("bridge.conversion.check.pin_failures", lambda *a, **k: None)
        with pytest.raises(ValidationMismatch):
            api.convert(source, tmp_path / "plain.onnx", feeds=_feeds(tmp_path), **extra)
    result = api.convert(source, tmp_path / "out.onnx", feeds=_feeds(tmp_path), report=tmp_path / "r.json", **extra)
    assert result.passed and result.written
    (comp,) = result.validation
    assert comp.pinning is not None and comp.pinning["explained"]
    (pin,) = comp.pinning["pins"]
    assert 0 < comp.pinning["pins"][pin]["max_abs"] < 1e-6
    (topk,) = [s for s in comp.pinning["selections"] if s["op"] == "TopK"]
    assert topk["changed"] == 1
    note = next(o.note for o in comp.outputs if o.name == boxes)
    assert f"pinned at 1 selection input(s): {pin}" in note and "unpinned:" in note
    assert "pinned" in comp.summary()
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["validation"][0]["pinning"]["explained"] and data["validation"][0]["passed"]
    _rendered_everywhere(result, tmp_path, f"pinned at 1 selection input(s): {pin}", monkeypatch)


@pytest.mark.parametrize("framework", ["onnx", "mxnet"])
def test_wrong_after_the_cut_still_fails(framework: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, extra, boxes = SOURCES[framework](tmp_path)
    _edit(monkeypatch, 5e-7, broken=boxes)
    with pytest.raises(ValidationMismatch) as caught:
        api.convert(source, tmp_path / "out.onnx", feeds=_feeds(tmp_path), **extra)
    assert not (tmp_path / "out.onnx").exists()
    (comp,) = caught.value.result.validation
    assert not comp.passed and "pinning did not explain" in comp.summary() and "still differ" in comp.summary()
    _rendered_everywhere(caught.value.result, tmp_path, "pinning did not explain", monkeypatch)


def _rendered_everywhere(result: Any, tmp: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``text`` in the CLI's table, the JSON, Markdown and HTML reports."""
    import io

    from rich.console import Console

    from bridge.cli import render
    from bridge.report import write_report

    buffer = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buffer, width=400))
    render.print_comparisons(result.validation)
    assert text in buffer.getvalue()
    data = result.to_dict()
    for suffix in ("json", "md", "html"):
        write_report(data, tmp / f"r.{suffix}")
        assert text in (tmp / f"r.{suffix}").read_text()


def test_a_nudge_beyond_the_tolerance_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, extra, _ = _onnx_source(tmp_path)
    _edit(monkeypatch, 0.01)
    with pytest.raises(ValidationMismatch) as caught:
        api.convert(source, tmp_path / "out.onnx", feeds=_feeds(tmp_path), **extra)
    (comp,) = caught.value.result.validation
    assert not comp.passed and comp.pinning is not None and not comp.pinning["explained"]
    assert "upstream of the selections" in comp.pinning["text"]


def test_a_passing_conversion_does_no_pinning_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, extra, _ = _onnx_source(tmp_path)

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("pinning ran for a passing comparison")

    monkeypatch.setattr("bridge.conversion.pinning.explain_by_pinning", never)
    monkeypatch.setattr("bridge.conversion.pinning.TapsPinSource", never)
    monkeypatch.setattr("bridge.conversion.pinning.has_selection_ops", never)  # not even a scan of the graph
    monkeypatch.setattr("bridge.conversion.pinning.onnx_runtimes", never)
    result = api.convert(source, tmp_path / "out.onnx", feeds=_feeds(tmp_path), **extra)
    assert result.passed and result.validation[0].pinning is None


@pytest.mark.parametrize(("target", "explained"), [("ToyTarget", True), ("WrongAfterTheCutTarget", False)])
def test_the_delivered_artefact_gets_the_same_proof(target: str, explained: bool, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy target's runtime runs its own artefact: its failure gets the proof onnxruntime gets, each variant
    made into that target's artefact; an artefact also wrong after the cut (its converter's fault) still fails."""
    from bridge import runtimes, targets

    monkeypatch.setitem(runtimes._REGISTRY.entries, "toy", "tests.bridge.conversion.toys:ToyRuntime")
    monkeypatch.setitem(targets._REGISTRY.entries, "toy", f"tests.bridge.conversion.toys:{target}")
    source, extra, _ = _onnx_source(tmp_path)
    _edit(monkeypatch, 5e-7)
    kwargs = dict(feeds=_feeds(tmp_path), to="toy", isolated=False, validate=["onnxruntime", "toy"],
                  artefact_dir=tmp_path / "art", **extra)
    if explained:
        result = api.convert(source, tmp_path / "out.onnx", **kwargs)
        by = {c.candidate: c for c in result.validation}
        assert result.written and (tmp_path / "art" / "out.toy").is_file()
    else:
        with pytest.raises(ValidationMismatch) as caught:
            api.convert(source, tmp_path / "out.onnx", **kwargs)
        by = {c.candidate: c for c in caught.value.result.validation}
        assert not (tmp_path / "art" / "out.toy").exists()
    assert by["onnxruntime"].passed and by["onnxruntime"].pinning["explained"]  # type: ignore[index]
    assert by["toy"].passed is explained and by["toy"].pinning["explained"] is explained  # type: ignore[index]
    if not explained:
        assert "still differ" in by["toy"].summary()


@pytest.mark.parametrize("delta", [5e-7, 0.01])
def test_validate_proves_the_tie_too(delta: float, tmp_path: Path) -> None:
    """``bridge validate MODEL --source SRC``: the same proof on a model handed in (explained only within tolerance)."""
    source, _, _ = _onnx_source(tmp_path)
    candidate = topk_model()
    nudge_scores(candidate, delta)
    onnx.save(candidate, tmp_path / "cand.onnx")
    if delta > 1e-3:
        with pytest.raises(ValidationMismatch, match="upstream of the selections"):
            api.validate(tmp_path / "cand.onnx", source=source, feeds=_feeds(tmp_path))
        return
    result = api.validate(tmp_path / "cand.onnx", source=source, feeds=_feeds(tmp_path))
    (comp,) = result.comparisons
    assert comp.passed and comp.pinning is not None and comp.pinning["explained"] and "scores" in comp.pinning["pins"]


def test_an_mxnet_peak_mask_flipped_by_a_ulp_is_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CenterNet's decoder in 1-D as an MXNet symbol: scores * (max-pool 3 == scores) -> topk -> take; the
    converted model's scores nudged by a few ulps make neighbours 2 and 3 swap which one is the peak."""
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("MXNet is not installed (pip install 'bridge[mxnet]')")
    scores = mx.sym.sigmoid(mx.sym.var("x"), name="scores")
    pooled = mx.sym.Pooling(scores, kernel=(1, 3), pad=(0, 1), stride=(1, 1), pool_type="max", name="pool")
    peaks = mx.sym.broadcast_mul(scores, mx.sym.broadcast_equal(pooled, scores, name="peak"), name="peaks")
    idx = mx.sym.topk(mx.sym.reshape(peaks, shape=(0, -1), name="flat"), axis=-1, k=3, ret_typ="indices", name="top")
    boxes = mx.sym.take(mx.sym.var("boxes"), mx.sym.reshape(idx, shape=(-1,)), axis=0, name="kept")
    boxes.save(str(tmp_path / "net-symbol.json"))
    mx.nd.save(str(tmp_path / "net-0000.params"), {})
    np.savez(tmp_path / "feeds.npz", x=PEAK_LOGITS.reshape(1, 1, 1, -1), boxes=BOXES)
    to_proto = ModelContainer.to_proto

    def edited(self: ModelContainer, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        proto = to_proto(self, *args, **kwargs)
        nudge_peak(proto, delta, tensor="scores_output")
        return proto

    monkeypatch.setattr(ModelContainer, "to_proto", edited)
    extra: dict[str, Any] = {"inputs": ["x:1,1,1,8", "boxes:8,4"]}
    delta = 5e-7
    with monkeypatch.context() as m:  # without the proof the flipped peak fails the kept boxes
        m.setattr("bridge.conversion.check.pin_failures", lambda *a, **k: None)
        with pytest.raises(ValidationMismatch):
            api.convert(tmp_path / "net-symbol.json", tmp_path / "plain.onnx", feeds=tmp_path / "feeds.npz", **extra)
    result = api.convert(tmp_path / "net-symbol.json", tmp_path / "out.onnx", feeds=tmp_path / "feeds.npz", **extra)
    (comp,) = result.validation
    assert result.passed and comp.pinning is not None and comp.pinning["explained"]
    (equal,) = [s for s in comp.pinning["selections"] if s["op"] == "Equal"]
    assert equal["changed"] == 2
    assert "comparison results changed" in next(o.note for o in comp.outputs if o.name == "kept_output")

    delta = 1e-2  # beyond the tolerance: the failure stands, upstream of the selections
    with pytest.raises(ValidationMismatch) as caught:
        api.convert(tmp_path / "net-symbol.json", tmp_path / "far.onnx", feeds=tmp_path / "feeds.npz", **extra)
    (comp,) = caught.value.result.validation
    assert not comp.passed and "upstream of the selections" in comp.pinning["text"]  # type: ignore[index]


@pytest.mark.parametrize("command", ["convert", "validate"])
def test_no_pinning_leaves_the_failure_standing(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--no-pinning``: the tie at the cut that the proof explains (test above) fails as measured, saying so."""
    source, extra, _ = _onnx_source(tmp_path)
    with pytest.raises(ValidationMismatch) as caught:
        if command == "convert":
            _edit(monkeypatch, 5e-7)
            api.convert(source, tmp_path / "out.onnx", feeds=_feeds(tmp_path), pinning=False, **extra)
        else:
            candidate = topk_model()
            nudge_scores(candidate, 5e-7)
            onnx.save(candidate, tmp_path / "cand.onnx")
            api.validate(tmp_path / "cand.onnx", source=source, feeds=_feeds(tmp_path), pinning=False)
    (comp,) = caught.value.result.validation if command == "convert" else caught.value.result.comparisons
    assert not comp.passed and comp.pinning is not None and "--no-pinning" in comp.pinning["text"]


def test_the_cli_turns_pinning_off(tmp_path: Path) -> None:
    from support import run_cli

    for command in ("convert", "validate"):
        assert "--no-pinning" in run_cli(command, "--help").stdout


@pytest.mark.parametrize("target", ["openvino", pytest.param("tflite", marks=pytest.mark.slow)])
def test_a_tie_at_the_cut_is_proved_on_the_real_targets_artefact(target: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``--to openvino`` / ``--to tflite``: the IR (.tflite) of the nudged model fails like onnxruntime does, and
    passes by the same proof, each pinned variant converted by the target."""
    import importlib.util

    need = {"openvino": ("openvino",), "tflite": ("ai_edge_litert", "tensorflow", "onnx_tf")}[target]
    if any(importlib.util.find_spec(m) is None for m in need):
        pytest.skip(f"--to {target} needs {', '.join(need)}")
    source, extra, _ = _onnx_source(tmp_path)
    _edit(monkeypatch, 5e-7)
    result = api.convert(source, tmp_path / "out.onnx", feeds=_feeds(tmp_path), to=target, isolated=False, **extra)
    assert result.passed and result.written
    runtime = {"openvino": "openvino", "tflite": "litert"}[target]
    by = {c.candidate: c for c in result.validation}
    assert set(by) == {"onnxruntime", runtime}
    for comp in by.values():
        assert comp.pinning is not None and comp.pinning["explained"], comp.summary()


def _softmax_topk_source(tmp: Path) -> tuple[Path, Path]:
    """An SSD's scoring in small: logits [1, 8, 2] -> transpose -> SoftmaxActivation(channel) -> transpose back ->
    topk(3) per class over the 8 boxes (class 1: sigmoid(LOGITS) in effect, elements 2 and 3 near-tied) -> class
    1's kept boxes.
    bridge moves the Softmax before the Transpose and cancels the Transpose pair: MXNet's cls_prob_output is left
    in the ONNX only transposed, as the moved Softmax's output."""
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("MXNet is not installed (pip install 'bridge[mxnet]')")
    prob = mx.sym.SoftmaxActivation(mx.sym.transpose(mx.sym.var("x"), axes=(0, 2, 1)), mode="channel", name="cls_prob")
    idx = mx.sym.topk(mx.sym.transpose(prob, axes=(0, 2, 1)), axis=1, k=3, ret_typ="indices", name="top")
    kept = mx.sym.reshape(mx.sym.slice_axis(idx, axis=2, begin=1, end=2), shape=(-1,))  # class 1's top 3
    mx.sym.take(mx.sym.var("boxes"), kept, axis=0, name="kept").save(str(tmp / "net-symbol.json"))
    mx.nd.save(str(tmp / "net-0000.params"), {})
    logits = np.stack([np.zeros_like(LOGITS[0]), LOGITS[0]], -1)[None]  # softmax([0, l])[1] = sigmoid(l)
    np.savez(tmp / "feeds.npz", x=logits.astype(np.float32), boxes=BOXES)
    return tmp / "net-symbol.json", tmp / "feeds.npz"


def test_a_tie_after_a_moved_softmax_is_pinned_at_the_softmax(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime whose Softmax rounds otherwise swaps the near-tied scores at the cut: the pin must sit after the
    Softmax, where the source has cls_prob_output - which the ONNX holds only transposed, as the moved Softmax's
    output (recorded as a layout alias). Pinned before the Softmax, at its input, the swap stays and it fails."""
    from bridge.provenance import tensor_aliases

    source, feeds = _softmax_topk_source(tmp_path)
    to_proto = ModelContainer.to_proto

    def rounded_otherwise(self: ModelContainer, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        proto = to_proto(self, *args, **kwargs)
        (moved,) = tensor_aliases({p.key: p.value for p in proto.metadata_props})  # the Softmax's output
        d = np.zeros((1, 8, 2), np.float32)
        d[0, 3, 1] = 5e-7
        from pinning_models import _insert_add

        _insert_add(proto, moved, d, "rounding")
        return proto

    monkeypatch.setattr(ModelContainer, "to_proto", rounded_otherwise)
    extra = {"inputs": ["x:1,8,2", "boxes:8,4"], "feeds": feeds, "isolated": False}
    result = api.convert(source, tmp_path / "out.onnx", **extra)
    (comp,) = result.validation
    assert result.passed and comp.pinning is not None and comp.pinning["explained"]
    (pin,) = comp.pinning["pins"]
    assert pin != "x"  # after the Softmax, not at its input
    with monkeypatch.context() as m:  # without the alias the source has nothing after the Softmax to pin
        m.setattr("bridge.conversion.pinning.tensor_aliases", lambda _meta: {})
        with pytest.raises(ValidationMismatch) as caught:
            api.convert(source, tmp_path / "plain.onnx", **extra)
        assert not caught.value.result.validation[0].pinning["explained"]


@pytest.mark.parametrize(("claimed", "perm"), [("softmax", [0, 1, 2]), ("x", [0, 2, 1])],
                         ids=["wrong-axes", "another-tensor"])
def test_a_layout_alias_the_model_claims_is_measured_before_use(claimed: str, perm: list[int], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout alias is the model's claim (its metadata), so pinning measures it against the source before using
    it: a tampered one (the moved Softmax's output claimed to be MXNet's cls_prob in the wrong axis order, or the
    logits claimed to be cls_prob) is not used and the verdict says so; the near-tie then stays unexplained and the
    model FAILs."""
    from bridge.provenance import TENSOR_ALIASES_META, tensor_aliases

    source, feeds = _softmax_topk_source(tmp_path)
    to_proto = ModelContainer.to_proto
    said: list[str] = []

    def tampered(self: ModelContainer, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        proto = to_proto(self, *args, **kwargs)
        (moved,) = tensor_aliases({p.key: p.value for p in proto.metadata_props})
        d = np.zeros((1, 8, 2), np.float32)
        d[0, 3, 1] = 5e-7
        from pinning_models import _insert_add

        _insert_add(proto, moved, d, "rounding")
        tensor = moved if claimed == "softmax" else claimed
        said.append(tensor)
        entry = next(p for p in proto.metadata_props if p.key == TENSOR_ALIASES_META)
        entry.value = json.dumps({tensor: {"of": "cls_prob_output", "perm": perm}})
        return proto

    monkeypatch.setattr(ModelContainer, "to_proto", tampered)
    with pytest.raises(ValidationMismatch) as caught:
        api.convert(source, tmp_path / "out.onnx", inputs=["x:1,8,2", "boxes:8,4"], feeds=feeds, isolated=False)
    pinning = caught.value.result.validation[0].pinning
    assert pinning is not None and not pinning["explained"]
    assert pinning["rejected_aliases"] == [f"{said[-1]} as transpose(cls_prob_output, {perm}): its values are not "
                                           "the source's"], pinning["rejected_aliases"]
    assert "the model's own layout aliases not used" in pinning["text"]
