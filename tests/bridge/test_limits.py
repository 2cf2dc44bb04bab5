"""bridge.limits: sizes parse, the limit nests per command, and a declared size over it is exit 3."""

from __future__ import annotations

import os

import pytest

from bridge.config import DEFAULT_MAX_MEMORY
from bridge.errors import EXIT_CONVERSION, ResourceLimitError, UsageError
from bridge.limits import check_allocation, max_memory, memory_limit, nbytes_of, parse_size, physical_memory


@pytest.mark.parametrize(("text", "expected"), [("4G", 4 * 2**30), ("512MiB", 512 * 2**20), ("1e9", 10**9),
                                                ("10kb", 10_000), ("123", 123), ("2 GiB", 2 * 2**30)])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1G", "0", "4X", "nan", "inf"])
def test_bad_sizes_are_usage_errors_naming_the_option(text: str) -> None:
    with pytest.raises(UsageError, match="--max-memory"):
        parse_size(text)


def test_default_is_a_fraction_of_ram_and_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 0 < DEFAULT_MAX_MEMORY <= physical_memory()
    assert parse_size("0.25ram") == int(physical_memory() * 0.25)
    monkeypatch.setenv("BRIDGE_MAX_MEMORY", "3M")
    assert max_memory() == 3 * 2**20


def test_memory_limit_nests_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BRIDGE_MAX_MEMORY", raising=False)
    outer = max_memory()
    with memory_limit("64M"):
        with memory_limit(1000):
            assert max_memory() == 1000 and os.environ["BRIDGE_MAX_MEMORY"] == "1000"  # children inherit it
        assert max_memory() == 64 * 2**20
    assert max_memory() == outer and "BRIDGE_MAX_MEMORY" not in os.environ


def test_products_never_wrap() -> None:
    assert nbytes_of((2**62, 4), 4) == 2**66  # an int64 product would wrap to 0


def test_over_the_limit_names_what_the_size_and_the_limit() -> None:
    with pytest.raises(ResourceLimitError) as err:
        check_allocation(5 * 2**30, "m.params array #3", limit=2**30)
    assert err.value.exit_code == EXIT_CONVERSION
    assert "m.params array #3 declares 5 GiB" in str(err.value) and "limit of 1 GiB" in str(err.value)
    check_allocation(2**30, "fits", limit=2**30)


def test_anchors_for_absurd_feature_maps_are_refused_before_building_them() -> None:
    from bridge.passes.contrib.anchors import multibox_prior

    assert multibox_prior(4, 4, [0.2], [1, 2], False, [-1, -1], [0.5, 0.5]).shape == (1, 32, 4)
    with pytest.raises(ResourceLimitError, match="MultiBoxPrior anchors for a 100000 x 100000 feature map"):
        multibox_prior(100_000, 100_000, [0.2], [1, 2], False, [-1, -1], [0.5, 0.5])
