"""How ``--help`` reads: placeholders a user understands instead of typer's type tags, examples below
each command, and plain text when the help is piped.

typer labels every parameter with its Python type (``<int>``, ``<list[str]>``, ``<path>``); ``readable``
swaps each parameter of a built command for a variant that shows its ``metavar`` instead: the one
declared with the option (``NAME:SHAPE[:DTYPE]``), else the option's name in capitals as argparse does
(``--jobs JOBS``); flags and positional arguments show no tag at all (an argument is already named by
its placeholder). ``examples`` formats an epilog for either help style. Imports typer only: this runs for
``bridge --help``, which must stay fast.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

import typer.core
from typer import _click

HELP_OPTIONS = ("-h", "--help")  # -h too: tf2onnx's, Polygraphy's and argparse's users type it
RICH_MIN_COLUMNS = 100  # narrower, typer's panels squeeze the help column of a long option list into slivers


def markup_mode() -> Any:
    """Rich help (panels) on a terminal at least ``RICH_MIN_COLUMNS`` wide; click's plain help otherwise and
    when stdout is piped or logged: lines wrap at word boundaries, no box drawing, and typer's rich help
    machinery (a tenth of a second) is not imported."""
    return "rich" if sys.stdout.isatty() and shutil.get_terminal_size().columns >= RICH_MIN_COLUMNS else None


def examples(*commands: str, note: str = "", codes: bool = False) -> str:
    """An epilog listing example command lines, kept one per line in both help styles (click re-wraps a
    paragraph unless it starts with ``\\b``; typer's rich help keeps single newlines); ``codes``: the exit code
    table after them. Every example runs as written in a checkout, in order (files an earlier one writes under
    ``out/``); a ``# exit N`` comment says the exit code it ends with (tests/cli/test_help_examples.py runs them)."""
    keep = "" if markup_mode() == "rich" else "\b\n"
    text = "Examples:\n\n" + keep + "\n".join(f"  {c}" for c in commands)
    text += f"\n\n{note}" if note else ""
    return text + (f"\n\n{exit_codes()}" if codes else "")


def exit_codes() -> str:
    """The exit codes of every command (``bridge.errors.EXIT_CODES``), one per line in both help styles."""
    from bridge.errors import EXIT_CODES

    keep = "" if markup_mode() == "rich" else "\b\n"
    return "Exit codes (every command):\n\n" + keep + "\n".join(f"  {code:>3}  {text}" for code, text in EXIT_CODES.items())


class _ReadableOption(typer.core.TyperOption):
    def display_type_rich(self, ctx: _click.Context) -> str | None:
        return None if self.is_flag or self.count else self.metavar


class _ReadableArgument(typer.core.TyperArgument):
    def display_type_rich(self, ctx: _click.Context) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        """``SOURCE`` for a required argument (typer writes ``{SOURCE}``, which reads as a template to fill in
        or a shell brace expansion), ``[MODEL]`` for an optional one, as argparse and click show them."""
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")


def readable(command: _click.Command, *, subcommands: bool = True) -> _click.Command:
    """``command`` (and its subcommands) with a placeholder, never a type tag, on every parameter; returns it."""
    # the help option is made (and cached by click) here: with -h among its names, as the root's context says
    ctx = _click.Context(command, info_name=command.name, help_option_names=list(HELP_OPTIONS))
    for param in command.get_params(ctx):  # the help option included
        if isinstance(param, typer.core.TyperOption) and not isinstance(param, _ReadableOption):
            if param.metavar is None and not (param.is_flag or param.count):
                param.metavar = (param.name or "value").upper()
            param.__class__ = _ReadableOption
        elif isinstance(param, typer.core.TyperArgument) and not isinstance(param, _ReadableArgument):
            if param.metavar is None:
                param.metavar = (param.name or "value").upper()
            param.__class__ = _ReadableArgument
    if subcommands:
        for sub in getattr(command, "commands", {}).values():
            readable(sub)
    return command
