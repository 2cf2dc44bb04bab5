"""The `bridge` command line: parses arguments into bridge.api calls and renders their results.

No conversion logic lives here. Exit codes (``bridge.errors.EXIT_CODES``, listed by ``bridge --help``): 0 ok,
1 validation mismatch (or problems found by inspect), 2 usage error, 3 conversion error, 4 not installed,
70 internal error (a bug: please report it with the traceback shown), 130 interrupted.

Start-up stays fast: ``COMMANDS`` names each command's module and one-line summary, and a command's module
(with onnx, numpy and the conversion layer behind it) is imported only when that command runs or shows its
own help; ``bridge --help`` and ``bridge --version`` import none of them.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any, NamedTuple

import typer
import typer.core
from typer.exceptions import TyperException

from bridge.cli.helptext import HELP_OPTIONS, examples, markup_mode, readable
from bridge.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, BridgeError, cli_calling


class CommandEntry(NamedTuple):
    """Where a command lives (its module has ``register(app)``) and the line ``bridge --help`` shows for it."""

    module: str
    summary: str


COMMANDS: dict[str, CommandEntry] = {
    "convert": CommandEntry("bridge.cli.convert", "Convert SOURCE to ONNX, run the ONNX stage, validate against "
                                                  "the source framework."),
    "inspect": CommandEntry("bridge.cli.inspect_model", "Opsets, IR version, signature (symbolic dims flagged), op "
                                                        "histogram, size, problems."),
    "validate": CommandEntry("bridge.cli.validate", "Run MODEL and compare it with --source (run now) or "
                                                    "--reference (a saved RunResults)."),
    "debug": CommandEntry("bridge.cli.debug", "Compare every intermediate tensor of SOURCE and its conversion; "
                                              "name the first node that diverges and the pass that made it."),
    "graft-nms": CommandEntry("bridge.cli.graft", "Graft decoding + per-class NMS onto MODEL's box and score "
                                                  "outputs."),
    "migrate": CommandEntry("bridge.cli.migrate", "Convert and validate every model of MANIFEST, each in its own "
                                                  "process; write report.json/.md/.html."),
    "bench": CommandEntry("bridge.cli.bench", "Latency, throughput, first run and peak memory of MODEL in each "
                                              "runtime and of --source in its framework."),
    "shapes": CommandEntry("bridge.cli.shapes", "Make shapes static, make axes dynamic, or build shape buckets "
                                                "from data."),
}


def load_command(name: str) -> typer.core.TyperCommand | typer.core.TyperGroup:
    """The click command ``name`` as its module's ``register`` declares it (the module is imported now)."""
    entry = COMMANDS[name]
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=markup_mode())
    importlib.import_module(entry.module).register(holder)
    command = typer.main.get_group(holder).commands[name]
    command.short_help = entry.summary
    return readable(command)  # type: ignore[return-value]


class _LazyCommands(MutableMapping[str, Any]):
    """The root group's commands by name: a registered command's module is imported on first access; commands
    added the ordinary way (``add_command``, ``app.add_typer``) are kept as given."""

    def __init__(self, given: MutableMapping[str, Any] | None = None) -> None:
        self._loaded: dict[str, Any] = dict(given or {})

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            self._loaded[name] = load_command(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (n for n in self._loaded if n not in COMMANDS)

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self._loaded))

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._loaded


class LazyGroup(typer.core.TyperGroup):
    """The root group: lists every command from ``COMMANDS`` without importing it (its help shows the
    summaries) and imports a command's module only to run it or show its own help."""

    def __init__(self, *, commands: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _LazyCommands(commands if isinstance(commands, MutableMapping) else None)
        self._listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if self._listing and cmd_name in COMMANDS and not isinstance(self.commands, dict):
            loaded = self.commands._loaded  # type: ignore[attr-defined]
            if cmd_name not in loaded:  # a stand-in carrying the summary: listing must not import the module
                return typer.core.TyperCommand(cmd_name, help=COMMANDS[cmd_name].summary,
                                               short_help=COMMANDS[cmd_name].summary)
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # names only: nothing is imported

    def invoke(self, ctx: Any) -> Any:
        """Ctrl-C ends a command with exit code 130 and says so (typer would end it silently); a ``--report``
        was written by the command on the way out, naming the stage it stopped in."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            from bridge.cli.render import err

            err.print("[yellow]interrupted[/yellow] (Ctrl-C): nothing half-written was left behind", highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        readable(self, subcommands=False)
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="bridge", cls=LazyGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    rich_markup_mode=markup_mode(), context_settings={"help_option_names": list(HELP_OPTIONS)},
    help="Convert PyTorch / MXNet / TensorFlow / ONNX models to ONNX and prove them in each target runtime.",
    epilog=examples("bridge convert examples/mxnet_ssd/model-symbol.json --input data:4,3,64,64 --dynamic data:0=batch "
                    "-o out/ssd.onnx",
                    "bridge inspect out/ssd.onnx --nodes",
                    "bridge -v validate out/ssd.onnx --source examples/mxnet_ssd/model-symbol.json --input "
                    "data:2,3,64,64 --localize",
                    note="Run 'bridge COMMAND --help' (or -h) for a command's options and examples.", codes=True),
)


def _show_version(value: bool) -> None:
    if value:
        from bridge.version import __version__

        typer.echo(f"bridge {__version__}")  # plain: no console machinery to import for one line
        raise typer.Exit(0)


def test_hooks() -> contextlib.AbstractContextManager[Any]:
    """The test hook of ``BRIDGE_TEST_BREAK`` (``bridge.debug.breakage``) for one command; nothing when unset."""
    text = os.environ.get("BRIDGE_TEST_BREAK", "").strip()
    if not text:
        return contextlib.nullcontext()
    from rich.markup import escape

    from bridge.cli.render import err
    from bridge.debug.breakage import broken

    err.print(f"[yellow]test hook BRIDGE_TEST_BREAK={escape(text)}: conversion deliberately broken[/yellow]")
    return broken(text)


@app.callback()
def _root(ctx: typer.Context,
          verbose: Annotated[int, typer.Option("--verbose", "-v", count=True,
                                               help="-v info, -vv debug (before or after the command)")] = 0,
          version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_show_version,
                                                help="print bridge's version and exit")] = False) -> None:
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    ctx.with_resource(test_hooks())  # BRIDGE_TEST_BREAK (README: debugging), for this command only


_VERBOSITY = re.compile(r"-v+|--verbose")


def hoist_verbosity(args: list[str]) -> list[str]:
    """``-v``/``-vv``/``--verbose`` anywhere before ``--`` moved to the front, where the root option
    reads them: the README lists them among a command's options, so ``bridge convert ... -v`` works."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if _VERBOSITY.fullmatch(a)]
    return [*flags, *(a for a in args[:end] if not _VERBOSITY.fullmatch(a)), *args[end:]]


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and map every outcome to the documented exit code."""
    def err() -> Any:
        from bridge.cli.render import err

        return err

    try:
        # without standalone mode click returns (not raises) the code of a typer.Exit from a command
        with cli_calling():  # the library's errors name options as flags, as the user typed them
            # prog_name: usage lines say `bridge` however it was started (`python -m bridge`, a test's main())
            code = app(args=hoist_verbosity(sys.argv[1:] if argv is None else list(argv)), prog_name="bridge",
                       standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        err().print("aborted")
        return EXIT_USAGE
    except TyperException as exc:  # usage errors from argument parsing (click's, vendored by typer)
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err().print(f"error: {exc}")
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    except BridgeError as exc:
        from rich.markup import escape

        err().print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)  # a command in it stays one line
        return exc.exit_code
    except Exception:
        err().print("[red]internal error[/red] (a bug in bridge; please report it with this traceback):")
        err().print(traceback.format_exc(), highlight=False, markup=False)
        return EXIT_INTERNAL
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
