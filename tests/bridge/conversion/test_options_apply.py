"""An option the chosen adapter would not read is refused naming the option and the source, never accepted and
ignored: another framework's own option (``--exporter`` for an MXNet symbol) and a ``source_specific`` core
option the adapter does not list in ``honours`` (``--weights`` for an ONNX file, ``--outputs`` for PyTorch).

The cases are derived from the registries (every registered framework x every option some other adapter
owns or this one does not honour), so an adapter or option added later is covered without a new list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from adapters import get_adapter, registered_frameworks
from bridge.config import Option
from bridge.conversion.options import build_config, convert_options
from bridge.conversion.recipe import pick_adapter
from bridge.errors import UsageError


def _sources(folder: Path) -> dict[str, str]:
    """One source per framework that its adapter claims without importing the framework."""
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])]), folder / "m.onnx")
    nodes = [{"op": "null", "name": "data", "inputs": []},
             {"op": "Activation", "name": "r", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]}]
    (folder / "net-symbol.json").write_text(json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[1, 0, 0]]}))
    (folder / "factory.py").write_text("def make():\n    return None\n")
    (folder / "m.keras").write_bytes(b"")
    (folder / "weights.bin").write_bytes(b"")
    return {"onnx": str(folder / "m.onnx"), "mxnet": str(folder / "net-symbol.json"),
            "torch": f"{folder / 'factory.py'}:make", "tensorflow": str(folder / "m.keras")}


def _value(o: Option, folder: Path) -> Any:
    """A value other than the default for ``o``."""
    if o.choices is not None:
        return next(c for c in o.choices() if c != o.default)
    if o.name == "weights":
        return folder / "weights.bin"
    if o.type is bool:
        return not o.default
    return ["t"] if isinstance(o.default, list) or "list" in str(o.type) else "t"


def _unread(framework: str) -> list[Option]:
    adapter = get_adapter(framework)
    honoured = set(getattr(adapter, "honours", ()))
    return [o for o in convert_options()
            if (o.group.startswith("adapter:") and o.group != f"adapter:{framework}")
            or (o.source_specific and o.name not in honoured)]


CASES = [(fw, o.name) for fw in registered_frameworks() for o in _unread(fw)]


def test_the_cases_cover_the_options_an_adapter_does_not_read() -> None:
    named = {name for _fw, name in CASES}
    assert {"weights", "outputs", "exporter", "signature", "graph_inputs"} <= named
    assert ("onnx", "weights") in CASES and ("torch", "outputs") in CASES and ("mxnet", "exporter") in CASES
    assert ("mxnet", "output_names") not in CASES  # MXNet renames its outputs (adapters/mxnet/adapter.py)


@pytest.mark.parametrize(("framework", "name"), CASES)
def test_an_option_the_adapter_would_not_read_is_refused(tmp_path: Path, framework: str, name: str) -> None:
    source = _sources(tmp_path)[framework]
    o = next(o for o in convert_options() if o.name == name)
    cfg = build_config(source, tmp_path / "out.onnx", {name: _value(o, tmp_path)})
    with pytest.raises(UsageError) as err:
        pick_adapter(cfg)
    text = str(err.value)
    assert text.startswith(o.cli_flags[0]) and source in text and f"the {framework} adapter" in text


@pytest.mark.parametrize("framework", registered_frameworks())
def test_options_the_adapter_reads_and_defaults_pass(tmp_path: Path, framework: str) -> None:
    sources = _sources(tmp_path)
    honoured = [o for o in convert_options() if o.group == f"adapter:{framework}"
                or (o.source_specific and o.name in getattr(get_adapter(framework), "honours", ()))]
    values = {o.name: _value(o, tmp_path) for o in honoured if o.name != "output_names"}
    assert pick_adapter(build_config(sources[framework], tmp_path / "o.onnx", values)).framework == framework
    # every option at its default (exporter=auto included) is no value at all
    defaults = {o.name: o.default for o in convert_options() if o.group.startswith("adapter:")}
    assert pick_adapter(build_config(sources[framework], tmp_path / "o.onnx", defaults)).framework == framework


def test_a_raw_source_option_is_checked_too(tmp_path: Path) -> None:
    """``api.convert(..., options={...})`` and manifest ``options:`` reach ``Source.options`` directly."""
    source = _sources(tmp_path)["onnx"]
    cfg = build_config(source, tmp_path / "o.onnx", {}, raw_options={"signature": "serving_default"})
    with pytest.raises(UsageError, match="--signature serving_default"):
        pick_adapter(cfg)
