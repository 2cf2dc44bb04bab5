"""``file.py:factory`` entry points of the mutation suite's in-code PyTorch sources (the trained SSD ported,
``ssd_ports``), so ``bridge convert`` / ``bridge validate --source`` load them from the CLI and the API alike."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import ssd_ports  # noqa: E402


def torchvision_ssd() -> Any:
    return ssd_ports.ported_ssd("torchvision")


def yolo_ssd() -> Any:
    return ssd_ports.ported_ssd("yolo")


def padded_ssd() -> Any:
    return ssd_ports.ported_ssd("tf")


def ssd_classifier() -> Any:
    return ssd_ports.ported_ssd("tf", classifier=True)
