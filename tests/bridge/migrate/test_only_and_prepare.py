"""A manifest whose sources are not there yet says what makes them (its ``prepare:`` line), and ``--only``
leaves the entries it does not name out before they are checked: one that is not run cannot block those that are."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.errors import UsageError
from bridge.migrate.manifest import ManifestError, load_manifest


def _manifest(folder: Path, extra_entry: str = "") -> Path:
    (folder / "a.onnx").write_bytes(b"")  # the entries are only loaded here, never converted
    path = folder / "manifest.yaml"
    path.write_text(
        "version: 1\n"
        "prepare: python build.py\n"
        "models:\n"
        "  - {name: a, source: a.onnx}\n"
        "  - {source: 'zoo/*/model-symbol.json', framework: mxnet}\n" + extra_entry, encoding="utf-8")
    return path


def test_a_glob_matching_nothing_names_the_prepare_command(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(_manifest(tmp_path))
    text = str(info.value)
    assert "matches no file" in text
    assert f"run it first: cd {tmp_path} && python build.py" in text


def test_only_leaves_out_an_entry_it_does_not_name(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "  - {name: b, source: a.onnx, opset: not-a-number}\n")
    (entry,) = load_manifest(path, only=["a"])  # neither the empty glob nor b's bad field blocks a
    assert entry.name == "a"
    with pytest.raises(ManifestError, match=r"models\[2\] 'b'\.opset"):
        load_manifest(path, only=["a", "b"])  # a named entry is checked as ever


def test_only_naming_no_model_lists_the_names_and_the_entries_not_named_yet(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--only: no model named 'zoo_x'.*models: a; not named yet: models\[1\]"):
        load_manifest(_manifest(tmp_path), only=["zoo_x"])


def test_the_bundled_migration_runs_its_bundled_models_before_build_models(tmp_path: Path) -> None:
    """`bridge migrate examples/migration/manifest.yaml --only mxnet_ssd,tiny_detector` works in a fresh clone."""
    from support import REPO

    manifest = tmp_path / "migration" / "manifest.yaml"
    manifest.parent.mkdir()
    manifest.write_text((REPO / "examples" / "migration" / "manifest.yaml").read_text(encoding="utf-8"),
                        encoding="utf-8")
    for folder in ("mxnet_ssd", "tiny_detector"):  # what the entries read, beside the manifest's folder
        (tmp_path / folder).symlink_to(REPO / "examples" / folder)
    names = [e.name for e in load_manifest(manifest, only=["mxnet_ssd", "tiny_detector"])]
    assert names == ["mxnet_ssd", "tiny_detector"]
    with pytest.raises(ManifestError, match=r"cd \S*migration && python build_models\.py"):
        load_manifest(manifest)
