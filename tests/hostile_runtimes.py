"""Runtimes that misbehave on purpose, importable by name so isolated child processes can build them."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Mapping, Sequence

import numpy as np

from bridge.errors import UsageError
from bridge.runtimes.base import TensorMeta


class Misbehaving:
    """``infer`` does what ``how`` says: ok | abort | segfault | hang | allocate | usage | raise."""

    name = "misbehaving"

    def __init__(self, how: str) -> None:
        self.how = how

    def activate(self) -> None:
        pass

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta("x", (2,), "float32")]

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.how == "abort":
            os.abort()
        if self.how == "segfault":
            ctypes.string_at(0)
        if self.how == "hang":
            time.sleep(3600)
        if self.how == "allocate":
            blocks = [np.ones(2**27, np.uint8) for _ in range(64)]  # 8 GiB, touched
            return {"y": np.array([len(blocks)], np.float32)}
        if self.how == "usage":
            raise UsageError("the child says: bad option")
        if self.how == "raise":
            raise ZeroDivisionError("framework bug")
        return {"y": np.asarray(feeds["x"]) * 2, "pid": np.array([os.getpid()])}

    def deactivate(self) -> None:
        pass


def make(how: str) -> Misbehaving:
    return Misbehaving(how)
