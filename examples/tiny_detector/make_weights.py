"""Write examples/tiny_detector/weights.pt: a seeded state_dict (non-trivial BatchNorm statistics).

Run: python examples/tiny_detector/make_weights.py   (deterministic; the file is committed)
"""

from __future__ import annotations

from pathlib import Path

import torch
from model import build  # type: ignore[import-not-found]  # run from this folder's script path


def main() -> None:
    torch.manual_seed(1234)
    model = build()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    torch.save(model.state_dict(), Path(__file__).with_name("weights.pt"))


if __name__ == "__main__":
    main()
