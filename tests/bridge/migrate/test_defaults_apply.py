"""A manifest's ``defaults:`` apply to the entries whose adapter reads them; set on an entry, they are refused.

``bridge convert`` refuses an option the source's adapter would not read (``--exporter`` for an ONNX file).
A batch migration's ``defaults:`` block is shared by entries of several frameworks: an ``exporter`` default
is meant for the PyTorch entries, so an ONNX entry inherits nothing it cannot read (its report says which
defaults were not applied), while the same option written on the ONNX entry itself is still refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
from support import fcn_model

from bridge.migrate.batch import DEFAULT_CONVERT as CONVERT
from bridge.migrate.manifest import load_manifest
from bridge.migrate.worker import _convert_one, convert_kwargs, unread_defaults


def _entry(tmp_path: Path, entry: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    onnx.save(fcn_model(), str(tmp_path / "m.onnx"))
    (resolved,) = load_manifest({"defaults": defaults, "models": [{"name": "m", "source": "m.onnx", **entry}]},
                                base_dir=tmp_path)
    return resolved.to_dict()


def test_a_default_the_adapter_does_not_read_is_not_applied(tmp_path: Path) -> None:
    entry = _entry(tmp_path, {}, {"exporter": "dynamo", "opset": 17})
    assert unread_defaults(entry) == ["exporter"]  # opset is read by every adapter
    _src, _out, kwargs = convert_kwargs(entry, tmp_path / "out")
    assert kwargs["exporter"] != "dynamo" and kwargs["opset"] == 17


def test_the_same_option_on_the_entry_itself_is_still_refused(tmp_path: Path) -> None:
    entry = _entry(tmp_path, {"exporter": "dynamo"}, {})
    assert unread_defaults(entry) == []
    outcome = _convert_one({"entry": entry, "out_dir": str(tmp_path / "out"), "convert": CONVERT})
    assert outcome["status"] == "failed" and outcome["kind"] == "usage"
    assert "--exporter" in outcome["reason"]


def test_the_migration_converts_the_entry_and_its_report_names_the_default_left_out(tmp_path: Path) -> None:
    entry = _entry(tmp_path, {"inputs": ["x:1,3,8,8"], "dynamic": ["x:0=N", "x:2=H", "x:3=W"]}, {"exporter": "dynamo"})
    outcome = _convert_one({"entry": entry, "out_dir": str(tmp_path / "out"), "convert": CONVERT})
    assert outcome["status"] == "passed", outcome["reason"]
    warnings = outcome["conversion"]["warnings"]
    assert any(w.startswith("defaults: exporter not applied") for w in warnings), warnings
    md = next((tmp_path / "out").rglob("conversion.md")).read_text(encoding="utf-8")
    assert "defaults: exporter not applied" in md
    assert json.dumps(outcome)  # the outcome still travels as JSON
