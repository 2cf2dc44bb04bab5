"""The command line's own presentation options (``--json``, ``-o``), shared by the commands that print or write.

Every option that reaches ``bridge.api`` - inputs, tolerance, seed, isolation, the source, ... - is declared once
in ``bridge.conversion.options`` (in groups each command subscribes to) and turned into typer parameters there
(``cli_parameters``), with its bounds and parser; nothing here declares it again. This module imports typer only,
so a command that takes none of the conversion's options (``inspect``, ``graft-nms``) shows its help without
importing numpy and onnx.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

OutputOpt = Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="the .onnx file to write")]
AsJsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
