"""Reading a manifest file before anything interprets it: bounded, decoded and shape-checked.

YAML is a rich format and a manifest may come from anywhere. Before the schema (pydantic) sees a
manifest, ``read_yaml`` refuses what would turn into a hang, a huge allocation or an internal error:

* a file over ``MAX_BYTES``, text that is not UTF-8 (the byte offset is named), YAML nested deeper
  than the parser can recurse;
* ``check_raw``: aliases that expand a small file into a huge tree ("billion laughs": counted while
  walking, stopping at ``MAX_VALUES``), nesting deeper than ``MAX_DEPTH``, strings longer than
  ``MAX_STRING`` and names longer than ``MAX_NAME`` (a model's name becomes a folder name).

Each is a usage error (exit 2, as the README documents for a bad manifest): a manifest stands in for
options. Every message names the file and the field, and never prints the offending value itself (an
expanded alias can be gigabytes long): only its length or kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.errors import BadConfigFileError, UsageError

MAX_BYTES = 16 * 2**20
MAX_VALUES = 200_000  # scalars + containers, counting a value reached through an alias every time
MAX_DEPTH = 32
MAX_STRING = 4096  # PATH_MAX: no path, glob or option value is longer
MAX_NAME = 200  # a folder name under <out>/models/ (NAME_MAX is 255 bytes)


class ManifestTooLargeError(UsageError):
    """A manifest that expands past the bounds above."""


def read_yaml(path: Path) -> Any:
    """The parsed YAML of ``path``, checked by ``check_raw``."""
    import yaml

    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ManifestTooLargeError(f"{path}: {size:,} bytes; a manifest is at most {MAX_BYTES:,}")
        raw = path.read_bytes()
    except OSError as exc:
        raise BadConfigFileError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadConfigFileError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start}); save the manifest "
                                "as UTF-8") from None
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise ManifestTooLargeError(f"{path}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except yaml.YAMLError as exc:
        raise BadConfigFileError(f"{path}: not valid YAML: {str(exc)[:500]}") from None
    check_raw(data, str(path))
    return data


def check_raw(data: Any, where: str = "manifest") -> None:
    """UsageError when ``data`` (parsed YAML or the API's dicts) is past the bounds in the module docstring."""
    seen = 0
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, field, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ManifestTooLargeError(f"{where}: expands to more than {MAX_VALUES:,} values (YAML aliases "
                                        "repeating a value?); a manifest lists models, not data")
        if depth > MAX_DEPTH:
            raise ManifestTooLargeError(f"{where}: {field or 'the document'} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            limit = MAX_NAME if field.endswith(".name") or field == "name" else MAX_STRING
            if len(value) > limit:
                raise ManifestTooLargeError(f"{where}: {field or 'a value'} is {len(value):,} characters long "
                                            f"(at most {limit:,})")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                stack.append((item, f"{field}.{key}" if field else str(key)[:100], depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{field}[{k}]", depth + 1) for k, item in enumerate(value))
