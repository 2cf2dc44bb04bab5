"""PyTorch tensors computed inline in ``forward`` (a decode, a score threshold), which no module returns, come from
torch.onnx's own export of the source (``bridge.conversion.sources.torch_graph_taps``): in ``validate`` the source is
exported again on the validation inputs and a tensor is offered only where the candidate's node of that name is the
export's. The model is the mutation suite's trained SSD ported to PyTorch, rows [K, 7] (``mutation_sources``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from bridge import api
from bridge.config import Source
from bridge.errors import ValidationMismatch
from bridge.validation.graph import OnnxTaps

pytest.importorskip("torch", reason="PyTorch not installed (pip install 'bridge[torch]')")

MUTATION = Path(__file__).resolve().parents[2] / "bridge" / "validation" / "mutation"
SOURCE = f"{MUTATION / 'mutation_sources.py'}:yolo_ssd"
FEEDS = Path(__file__).resolve().parents[3] / "examples" / "mxnet_ssd" / "sample_inputs.npz"


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("torch_graph") / "yolo.onnx"
    api.convert(SOURCE, path, inputs=["data:4,3,64,64"], exporter="torchscript", output_names=["detections"],
                feeds=str(FEEDS), isolated=False)
    return path


def _stand_in(model: onnx.ModelProto) -> object:
    """What ``validate`` hands the taps: the candidate in an ExportResult that is no export."""
    from adapters.base import ExportResult
    from bridge.config import InputSpec

    return ExportResult(model=model, exporter="(existing model)", inputs=(InputSpec("data", (4, 3, 64, 64)),),
                        output_names=("detections",))


def _feeds() -> dict[str, np.ndarray]:
    return {"data": np.load(FEEDS)["data"]}


def test_the_inline_decode_is_offered_and_is_what_the_candidate_computes(converted: Path) -> None:
    from bridge.conversion.sources import torch_graph_taps

    candidate = onnx.load(converted)
    taps = torch_graph_taps(Source(SOURCE, options={"exporter": "torchscript"}), _stand_in(candidate), _feeds())
    assert taps is not None
    offered = taps.names()
    decoded = "/Clip_output_0"  # boxes.clamp(0, 1) in PortedSSD._candidates: no module's output
    assert decoded in offered and len(offered) > 20
    mine = OnnxTaps(candidate).run(_feeds(), [decoded])[decoded]
    theirs = taps.run(_feeds(), [decoded])[decoded]
    assert theirs.shape == mine.shape == (4, 320, 4)
    np.testing.assert_allclose(theirs, mine, atol=1e-6)


def test_a_node_the_candidate_computes_otherwise_is_not_offered(converted: Path) -> None:
    """Same name, another node (an op changed, as a pass rewriting it or a candidate traced on other inputs would
    have it): the export's tensor is no witness for it. The exporter is read from the candidate's names."""
    from bridge.conversion.sources import torch_graph_taps

    intact = torch_graph_taps(Source(SOURCE), _stand_in(onnx.load(converted)), _feeds())
    assert intact is not None and "/Clip_output_0" in intact.names()  # the export is cached for the next call
    candidate = onnx.load(converted)
    clip = next(n for n in candidate.graph.node if n.output[0] == "/Clip_output_0")
    clip.op_type = "Identity"
    del clip.input[1:]
    taps = torch_graph_taps(Source(SOURCE), _stand_in(candidate), _feeds())  # the same export, this candidate
    assert taps is not None
    assert "/Clip_output_0" not in taps.names() and "/Transpose_4_output_0" in taps.names()


def test_a_shifted_anchor_no_image_selects_fails_only_with_the_graph_taps(converted: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """One anchor moved where no validation image detects anything: the rows [K, 7] are unchanged, the decoded
    boxes (inline in forward) are not."""
    candidate = onnx.load(converted)
    centre_x = next(n for n in candidate.graph.node if n.output[0] == "/Add_output_0").input[1]  # + ax
    anchors = next(i for i in candidate.graph.initializer if i.name == centre_x)
    nms = next(n for n in candidate.graph.node if n.op_type == "NonMaxSuppression")
    scores = OnnxTaps(candidate).run(_feeds(), [nms.input[1]])[nms.input[1]]  # [B, C, N]
    quiet = int(np.argmin(scores.max(axis=(0, 1))))  # the anchor scoring lowest on every image: never detected
    values = onnx.numpy_helper.to_array(anchors).copy()
    values.reshape(-1)[quiet] += 0.05
    anchors.CopyFrom(onnx.numpy_helper.from_array(values, anchors.name))
    path = tmp_path / "shifted.onnx"
    onnx.save(candidate, path)
    with pytest.raises(ValidationMismatch, match=r"selection input\(s\) /Clip_output_0.* differ from the source.s"):
        api.validate(str(path), source=SOURCE, feeds=str(FEEDS), isolated=False)
    from bridge.conversion import sources

    monkeypatch.setattr(sources, "torch_graph_taps", lambda *a, **k: None)
    assert api.validate(str(path), source=SOURCE, feeds=str(FEEDS), isolated=False).passed
