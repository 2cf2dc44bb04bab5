"""The self-contained HTML report: parsed (culprit, boxes, embedded images, no network references) and,
where Chromium is installed, rendered in a real headless browser without errors."""

from __future__ import annotations

import io
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest
from debug_models import foldable_model

from bridge import api
from bridge.debug.breakage import broken
from bridge.report import write_report
from bridge.report.html import to_html, write_html
from bridge.report.images import Box, Overlay, available, render_histogram, render_overlay

pytestmark = pytest.mark.skipif(not available(), reason="Pillow not installed (pip install 'bridge[report]')")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.culprit_rows = 0
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("src"):
            self.srcs.append(a["src"] or "")
        if a.get("href"):
            self.hrefs.append(a["href"] or "")
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag == "tr" and a.get("class") == "culprit":
            self.culprit_rows += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _overlay(matched: bool) -> Overlay:
    image = np.zeros((32, 48, 3), np.uint8)
    image[8:24, 8:30] = 200
    ref = [Box(0.1, 0.2, 0.6, 0.8, 1, 0.9, True), Box(0.7, 0.1, 0.9, 0.3, 2, 0.5, matched)]
    cand = [Box(0.12, 0.2, 0.6, 0.8, 1, 0.85, True)]
    return Overlay("detections: image 0", image, ref, cand)


@pytest.fixture(scope="module")
def debug_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[Overlay]]:
    folder = tmp_path_factory.mktemp("report")
    source = folder / "m.onnx"
    onnx.save(foldable_model(), source)
    with broken("pass:FoldConstantsPass"):
        result = api.debug(source, inputs=["x:2,4"])
    data = result.to_dict()
    overlays = [_overlay(True), _overlay(False)]
    path = folder / "report.html"
    write_html(data, path, overlays)
    return path, data, overlays


def test_report_holds_culprit_images_and_boxes(debug_report: tuple[Path, dict, list[Overlay]]) -> None:
    path, data, overlays = debug_report
    page = _Page()
    page.feed(path.read_text())
    text = " ".join(page.text)
    assert {"culprit-verdict", "culprit-node", "culprit"} <= page.ids
    assert page.culprit_rows >= 2  # verdict table + divergence table (+ passes table)
    assert "scale" in text and "FoldConstantsPass" in text and "Mul" in text
    # every picture is embedded data, nothing is fetched
    assert page.srcs and all(s.startswith("data:image/png;base64,") for s in page.srcs)
    assert not [h for h in page.hrefs if h.startswith(("http:", "https:", "//"))]
    assert len(page.srcs) == len(overlays) + len(data["histograms"])
    assert "y" in data["histograms"]
    assert "2 reference, 1 converted boxes, 0 unmatched" in text and "2 reference, 1 converted boxes, 1 unmatched" in text


@pytest.mark.parametrize("matched", [True, False])
def test_overlay_draws_both_sides(matched: bool) -> None:
    from PIL import Image

    img = Image.open(io.BytesIO(render_overlay(_overlay(matched)))).convert("RGB")
    pixels = np.asarray(img)
    assert img.width == 320
    green = np.all(pixels == (0, 160, 60), axis=-1).sum()
    magenta = np.all(pixels == (220, 40, 200), axis=-1).sum()
    orange = np.all(pixels == (255, 60, 0), axis=-1).sum()
    assert green > 100 and magenta > 100
    assert bool(orange > 0) is (not matched)


def test_histogram_png() -> None:
    png = render_histogram([1e-6, 1e-3, 1.0], [5, 2], "y")
    assert png.startswith(b"\x89PNG")


@pytest.mark.parametrize("command", ["convert", "validate"])
def test_write_report_accepts_html_for_every_command(tmp_path: Path, command: str) -> None:
    comparison = {"reference": "ref", "candidate": "onnxruntime", "passed": False, "outputs": [
        {"name": "y", "passed": False, "cand_shape": [2], "max_abs": 0.5, "max_rel": 0.1, "mismatch_fraction": 1.0,
         "note": ""}]}
    data = {"command": command, "source": "m.onnx", "model": "m.onnx", "passed": False, "inputs": [], "outputs": [],
            "passes": [], "validation": [comparison], "comparisons": [comparison]}
    write_report(data, tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert html.startswith("<!doctype html>") and "onnxruntime" in html and to_html(data) == html


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(debug_report: tuple[Path, dict, list[Overlay]]) -> None:
    path, _, _ = debug_report
    common = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr",
              "--v=0", "--window-size=1000,800"]
    dom = subprocess.run([*common, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="culprit-node"' in dom.stdout and "scale" in dom.stdout
    # page errors (script errors, resources that failed to load) are logged as CONSOLE lines
    assert "CONSOLE" not in dom.stderr and "Uncaught" not in dom.stderr and "Failed to load resource" not in dom.stderr
