"""``bridge debug`` on the bundled MXNet SSD with one piece deliberately broken: a translator (the MXNet
adapter's SoftmaxActivation) and a lowering (MultiBoxDetection decoded with wrong variances). The debug
run must name that node and, for the lowering, the pass; the HTML report must carry the culprit, the
boxes and the images as embedded data."""

from __future__ import annotations

import importlib.util
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support import REPO

from bridge import api
from bridge.debug.breakage import broken

SSD = REPO / "examples" / "mxnet_ssd"
needs_mxnet = pytest.mark.skipif(importlib.util.find_spec("mxnet") is None,
                                 reason="mxnet not installed (pip install 'bridge[mxnet]')")

CASES = [
    # breakage, culprit MXNet node, its op, the tensor, who made it
    ("translator:SoftmaxActivation", "cls_prob", "SoftmaxActivation", "cls_prob_output", "export"),
    ("lowering:MultiBoxDetection.variances*2", "detection", "_contrib_MultiBoxDetection", "detection_output",
     "LowerMultiBoxDetectionPass"),
]


class _Report(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.ids: set[str] = set()
        self.culprit_rows = 0
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src") or "")
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag == "tr" and a.get("class") == "culprit":
            self.culprit_rows += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@needs_mxnet
@pytest.mark.parametrize(("spec", "node", "op", "tensor", "made_by"), CASES)
def test_debug_names_the_broken_node(tmp_path: Path, spec: str, node: str, op: str, tensor: str, made_by: str) -> None:
    report = tmp_path / "report.html"
    with broken(spec):
        result = api.debug(SSD / "model-symbol.json", inputs=["data:4,3,64,64"], dynamic=["data:0=batch"],
                           feeds=SSD / "sample_inputs.npz", report=report)
    culprit = result.culprit()
    assert not result.passed and culprit is not None
    assert (culprit["node"], culprit["op"], culprit["tensor"], culprit["pass"]) == (node, op, tensor, made_by)
    # its inputs agree (that is what makes it the culprit) and every earlier tensor too
    rows = result.divergence.rows  # type: ignore[union-attr]
    at = next(i for i, r in enumerate(rows) if r.culprit)
    assert at > 10 and all(r.error.agree for r in rows[:at])
    assert culprit["inputs"] and all(i["reference"]["shape"] == i["candidate"]["shape"] for i in culprit["inputs"])
    # the lowering's variances are the attribute the report shows for the culprit
    if op == "_contrib_MultiBoxDetection":
        assert culprit["attributes"]["variances"] == "(0.1, 0.1, 0.2, 0.2)"
    assert any("contrib" in n and "LowerMultiBoxDetectionPass" in n for n in result.notes)

    parsed = _Report()
    parsed.feed(report.read_text())
    text = " ".join(parsed.text)
    assert "culprit-verdict" in parsed.ids and "culprit-node" in parsed.ids and parsed.culprit_rows >= 2
    assert node in text and tensor in text
    pngs = [src for src in parsed.images if src.startswith("data:image/png;base64,")]
    assert len(pngs) == len(parsed.images) == len(result.overlays) + len(result.histograms)
    assert len(result.overlays) == 4 and "detection_output" in result.histograms
    boxes = sum(len(o.reference) + len(o.candidate) for o in result.overlays)
    assert boxes > 0
    counts = [tuple(map(int, m)) for m in re.findall(r"(\d+) reference, (\d+) converted boxes", text)]
    assert counts == [(len(o.reference), len(o.candidate)) for o in result.overlays]
