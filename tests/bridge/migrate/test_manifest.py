"""Manifests: defaults merged into entries, globs expanded, every bad field listed, published schema in sync."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bridge.migrate.manifest import (
    SCHEMA_PATH,
    ManifestError,
    load_manifest,
    parse_size,
    schema_text,
    select,
    write_schema,
)


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_defaults_merge_and_paths_resolve_from_the_manifest_folder(tmp_path: Path) -> None:
    path = _write(tmp_path, {
        "defaults": {"opset": 13, "timeout": 60, "tolerance": {"atol": 1e-3, "outputs": {"boxes": {"atol": 0.1}}},
                     "runtimes": ["onnxruntime"]},
        "models": [
            {"name": "a", "source": "m/a.onnx", "tolerance": {"rtol": 0.5}, "feeds": "f.npz"},
            {"name": "b", "source": "pkg/model.py:build", "params": "w.pt", "opset": 17, "runtimes": [],
             "inputs": [{"name": "x", "shape": [2, 3], "dtype": "f16", "dynamic": {0: "batch"}}, "y:1"],
             "max_memory": "1.5GiB", "disabled": True},
        ],
    })
    a, b = load_manifest(path)
    assert (a.opset, a.timeout, a.atol, a.rtol, a.tolerance) == (13, 60, 1e-3, 0.5, ["boxes=0.1,0.5"])
    assert a.source == str(tmp_path / "m/a.onnx") and a.feeds == str(tmp_path / "f.npz")
    assert a.convert["validate"] == ["onnxruntime"] and not a.disabled
    assert b.source == f"{tmp_path / 'pkg/model.py'}:build" and b.weights == str(tmp_path / "w.pt")
    assert (b.opset, b.convert["validate"], b.disabled, b.max_memory) == (17, [], True, int(1.5 * 2**30))
    assert b.inputs == ["x:2,3:float16", "y:1"] and b.dynamic == ["x:0=batch"]


def test_glob_expands_to_one_entry_per_match(tmp_path: Path) -> None:
    for name in ("resnet", "vgg"):
        (tmp_path / "zoo" / name).mkdir(parents=True)
        (tmp_path / "zoo" / name / "model-symbol.json").write_text("{}")
    path = _write(tmp_path, {"models": [{"source": "zoo/*/model-symbol.json", "framework": "mxnet"},
                                        {"name": "legacy_{parent}", "source": "zoo/*/model-symbol.json"}]})
    entries = load_manifest(path)
    assert [e.name for e in entries] == ["resnet", "vgg", "legacy_resnet", "legacy_vgg"]
    assert entries[1].source == str(tmp_path / "zoo/vgg/model-symbol.json") and entries[1].framework == "mxnet"


@pytest.mark.parametrize("data, expected", [
    ({"models": [{"name": "a", "source": "x", "opset": 99}]}, ["models[0] 'a'.opset: Input should be less than or equal to"]),
    ({"models": [{"name": "a", "source": "x", "tolerence": 1}]}, ["models[0] 'a'.tolerence: unknown field"]),
    ({"models": [{"name": "a b", "source": "x"}]}, ["models[0] 'a b'.name: 'a b' must be letters"]),
    ({"models": [{"name": "a"}]}, ["models[0] 'a'.source: Field required"]),
    ({"models": [{"name": "a", "source": "x"}, {"name": "a", "source": "y"}]}, ["name 'a' is used by 2 entries"]),
    ({"models": [{"source": "none/*.json"}]}, ["models[0].source: source 'none/*.json' matches no file"]),
    ({"models": []}, ["models: the manifest lists no model"]),
    ({"defaults": {"timeout": -1}, "models": [{"name": "a", "source": "x"}]}, ["defaults.timeout: Input should be greater than 0"]),
])
def test_one_clear_error_per_bad_field(tmp_path: Path, data: dict[str, object], expected: list[str]) -> None:
    with pytest.raises(ManifestError) as err:
        load_manifest(_write(tmp_path, data))
    assert len(err.value.problems) == len(expected)
    for problem, want in zip(err.value.problems, expected, strict=True):
        assert problem.startswith(want), problem


def test_every_problem_of_every_entry_is_listed_at_once(tmp_path: Path) -> None:
    data = {"defaults": {"opset": 99},
            "models": [{"name": "a", "source": "x", "inputs": ["x:1,a"], "to": "coreml"},
                       {"name": "b", "source": "y", "max_memory": "2 parsecs", "dynamic": ["bad"]},
                       "not a mapping",
                       {"name": "c", "source": "z", "inputs": [{"name": "x", "shape": [1, -2], "dtype": "f99"}]}]}
    with pytest.raises(ManifestError) as err:
        load_manifest(_write(tmp_path, data))
    fields = [p.split(":")[0] for p in err.value.problems]
    assert fields == ["defaults.opset", "models[0] 'a'.inputs", "models[0] 'a'.to", "models[1] 'b'.dynamic",
                      "models[1] 'b'.max_memory", "models[2]", "models[3] 'c'.inputs.0.shape.1",
                      "models[3] 'c'.inputs.0.dtype"]
    assert f"{len(fields)} problem(s)" in str(err.value) and err.value.exit_code == 2


def test_entries_may_be_given_as_python_dicts_and_selected_by_name(tmp_path: Path) -> None:
    entries = load_manifest([{"name": "a", "source": "a.onnx"}, {"name": "b", "source": "b.onnx"}], base_dir=tmp_path)
    assert [e.name for e in select(entries, ["b"])] == ["b"]
    with pytest.raises(Exception, match="no model named 'c'"):
        select(entries, ["c"])


def test_fingerprint_follows_entry_and_file_content(tmp_path: Path) -> None:
    src = tmp_path / "a.onnx"
    src.write_bytes(b"one")
    (a,) = load_manifest([{"name": "a", "source": "a.onnx"}], base_dir=tmp_path)
    (same,) = load_manifest([{"name": "a", "source": "a.onnx"}], base_dir=tmp_path)
    (other,) = load_manifest([{"name": "a", "source": "a.onnx", "opset": 13}], base_dir=tmp_path)
    assert a.fingerprint() == same.fingerprint() != other.fingerprint()
    before = a.fingerprint()
    src.write_bytes(b"two")
    assert a.fingerprint() != before


@pytest.mark.parametrize("text, size", [("512MiB", 512 * 2**20), ("512MB", 512 * 10**6), ("2GiB", 2 * 2**30),
                                        ("1.5G", int(1.5 * 2**30)), (1024, 1024), ("100", 100)])
def test_parse_size(text: str | int, size: int) -> None:
    assert parse_size(text) == size


def test_published_schema_matches_the_validating_models() -> None:
    """The published schema is generated from the option declarations: when it is stale this test writes the
    fresh one (so a new runtime, target or option is its own files plus this regenerated one) and fails saying
    so, for the regenerated file to be committed."""
    fresh = schema_text()
    if SCHEMA_PATH.read_text(encoding="utf-8") != fresh:
        write_schema()
        pytest.fail(f"{SCHEMA_PATH} was stale and has been regenerated from the option declarations: commit it")



@pytest.mark.parametrize(("text", "where"), [
    ("    tolerance: {atol: .inf}\n", "models[0] 'a'.tolerance.atol"),
    ("    tolerance: {rtol: .nan}\n", "models[0] 'a'.tolerance.rtol"),
    ("    tolerance: {outputs: {y: {atol: .inf}}}\n", "models[0] 'a'.tolerance.outputs.y.atol"),
    ("    timeout: .inf\n", "models[0] 'a'.timeout"),
    ("    step_timeout: .nan\n", "models[0] 'a'.step_timeout"),
])
def test_a_number_that_is_not_finite_is_refused_by_the_manifest_check(tmp_path: Path, text: str, where: str) -> None:
    """YAML's .inf passes a ``>= 0`` bound, and used to reach the worker as JSON null ("--atol None")."""
    path = tmp_path / "manifest.yaml"
    path.write_text("models:\n  - name: a\n    source: a.onnx\n" + text, encoding="utf-8")
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert err.value.problems == [f"{where}: Input should be a finite number"]


@pytest.mark.parametrize("field", ["artefact_dir", "report"])
@pytest.mark.parametrize("value", ["/tmp/elsewhere", "../../..", "inside"])
def test_where_outputs_go_is_the_migrations_and_is_refused_by_name(tmp_path: Path, field: str, value: str) -> None:
    """Absolute, escaping or not: a manifest cannot place a model's files (they went to its folder regardless)."""
    for data in ({"models": [{"name": "a", "source": "a.onnx", field: value}]},
                 {"defaults": {field: value}, "models": [{"name": "a", "source": "a.onnx"}]}):
        with pytest.raises(ManifestError) as err:
            load_manifest(_write(tmp_path, data))
        assert len(err.value.problems) == 1 and f"{field}: a migration writes" in err.value.problems[0]
