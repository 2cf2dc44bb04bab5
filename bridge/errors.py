"""Error hierarchy: what a user can cause (BridgeError) versus a bug in bridge (BridgeInternalError).

Every user-facing failure carries the CLI exit code it maps to, so the CLI never has to guess. One code per kind
of problem, the same in every command (``EXIT_CODES``, shown by ``bridge --help`` and the README): 0 ok,
1 validation mismatch, 2 usage error, 3 conversion error, 4 not installed, 70 internal error, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import contextvars
import shlex
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
EXIT_CONVERSION = 3
EXIT_NOT_INSTALLED = 4
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C

# what each exit code means, in every command: the table of the README and of `bridge --help`
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok",
    EXIT_MISMATCH: "validation mismatch (inspect: problems found; migrate: a model failed)",
    EXIT_USAGE: "usage error: an argument, option value, file name or manifest to fix",
    EXIT_CONVERSION: "conversion error: a model or file bridge cannot convert or read",
    EXIT_NOT_INSTALLED: "not installed: a framework or runtime this needs is missing here (the message says "
                        "how to install it)",
    EXIT_INTERNAL: "internal error: a bug in bridge (please report it with the traceback shown)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C): nothing half-written is left; --report says the stage reached",
}


# the distribution's name on the package index (pyproject's [project].name); the import package and the command
# are both `bridge`, a name the index had long given to another project
DISTRIBUTION = "bridge-convert"


def checkout_root() -> Path | None:
    """The source checkout this bridge runs from (an editable install, or the folder on the path), or None when
    it runs from an installed wheel: the folder above the package holding the project's pyproject.toml and
    constraints.txt."""
    root = Path(__file__).resolve().parents[1]
    if (root / "constraints.txt").is_file() and (root / "pyproject.toml").is_file():
        try:
            if f'name = "{DISTRIBUTION}"' in (root / "pyproject.toml").read_text(encoding="utf-8"):
                return root
        except (OSError, UnicodeDecodeError):
            return None
    return None


def install_command(extras: str) -> str:
    """The command that installs bridge's ``extras`` (``torch``, ``openvino,litert``) the way this bridge was
    installed: in a checkout, its editable install pinned by the checkout's constraints.txt (run in the checkout,
    named); from a wheel, the distribution from the package index."""
    root = checkout_root()
    if root is not None:
        return f"cd {shlex.quote(str(root))} && pip install -c constraints.txt -e '.[{extras}]'"
    return f"pip install '{DISTRIBUTION}[{extras}]'"


# set while the command line calls the library: its errors then name options as flags (--input); a Python caller
# of bridge.api reads them in the API's keywords instead (inputs=[...]), see bridge.api
_CLI_CALLING: contextvars.ContextVar[bool] = contextvars.ContextVar("bridge_cli_calling", default=False)


@contextlib.contextmanager
def cli_calling() -> Iterator[None]:
    """Within it, errors keep the command line's words (the CLI wraps each command in it)."""
    token = _CLI_CALLING.set(True)
    try:
        yield
    finally:
        _CLI_CALLING.reset(token)


def is_cli_calling() -> bool:
    return _CLI_CALLING.get()


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the known name closest to a mistyped ``word`` (a typo: ``onxx``, ``onnxruntim``)
    or the one it begins (a shortened name: ``boxes`` for ``boxes-scores-classes``); "" when none is close."""
    import difflib

    known_list = [k for k in dict.fromkeys(known) if isinstance(k, str)]
    near = difflib.get_close_matches(word, known_list, n=1)
    if not near and word:
        begun = [k for k in known_list if k.lower().startswith(word.lower())]
        near = begun if len(begun) == 1 else []
    return f" (did you mean '{near[0]}'?)" if near else ""


def at_node(node: str, op: str | None, message: str) -> str:
    """``node 'NAME' (OP): MESSAGE``, saying the node once: a message that already opens with ``node 'NAME'`` (an
    error raised for that node, wrapped by its caller) keeps only its own words after it."""
    prefix = f"node '{node}'"
    if message.startswith(prefix):
        message = message[len(prefix):]
        if op and message.startswith(f" ({op})"):
            message = message[len(op) + 3:]
        message = message.removeprefix(":").lstrip()
    return f"{prefix}{f' ({op})' if op else ''}: {message}"


class BridgeError(Exception):
    """A failure the user can act on (bad input, unsupported model, mismatch). Exit code 3 unless overridden."""

    exit_code: int = EXIT_CONVERSION


class UsageError(BridgeError):
    """Arguments that cannot work together or do not parse (exit code 2)."""

    exit_code = EXIT_USAGE


class SourceNotFoundError(UsageError):
    """The source path, module or factory named by the user does not exist."""


class BadConfigFileError(UsageError):
    """A settings file the user wrote (a ``bridge migrate`` manifest, a ``--config`` YAML) that cannot be read
    as one: unreadable, not UTF-8, not YAML, nested past the parser. It stands in for options, so it is a
    usage error (exit code 2) like a bad option value, not a model bridge cannot convert (3)."""


class BadInputFileError(BridgeError):
    """A file exists but cannot be read as what it claims to be (corrupt, truncated, wrong format)."""


class AdapterUnavailableError(BridgeError):
    """The framework an adapter or runtime needs is not installed in this environment (exit code 4, in every
    command: the model and the options may be fine, this environment lacks an extra)."""

    exit_code = EXIT_NOT_INSTALLED

    def __init__(self, framework: str, purpose: str, install_hint: str = "", *, extra: str | None = None) -> None:
        """``extra``: bridge's extra that brings the framework (the hint is then ``install_command(extra)``, right
        for a checkout and for a wheel); ``install_hint``: a command of its own otherwise."""
        hint = install_command(extra) if extra else install_hint
        super().__init__(f"{framework} is not installed, so {purpose} is unavailable. Install it with: {hint}")
        self.framework = framework
        self.extra = extra


class ReferenceUnavailableError(BridgeError):
    """The source reference cannot run here (framework missing, or its runtime refused the model);
    validation is skipped with this reason rather than failing the conversion. Where it ends a command
    (``validate``), its exit code is its cause's: 4 for a framework that is not installed, else 3."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        if isinstance(cause, BridgeError):
            self.exit_code = cause.exit_code


class UnsafeSourceError(BridgeError):
    """Running the source for validation would have side effects (file writes, Python callbacks); refused
    unless the user trusts the source (``--trust-source``)."""


class RuntimeCrashedError(BridgeError):
    """A framework reference or candidate runtime died in its child process (signal, time or memory limit),
    or raised something that is not a bridge error; the message names the stage and the cause."""


class ExportError(BridgeError):
    """The framework exporter failed, or produced a model that breaks a promise (e.g. static means static)."""


class UnexpectedInputError(ExportError):
    """The converted model needs an input its source does not take (a weight or constant that became a graph
    input): its users could not run it, and validation must not invent a value for it. Names the input."""


class UnsupportedOpError(BridgeError):
    """One or more ops have no translator; lists *every* unsupported op with its node names and count."""

    def __init__(self, unsupported: Mapping[str, Iterable[str]], framework: str = "",
                 reasons: Mapping[str, str] | None = None) -> None:
        self.unsupported = {op: list(nodes) for op, nodes in sorted(unsupported.items())}
        lines = []
        for op, nodes in self.unsupported.items():
            shown = ", ".join(nodes[:5]) + (f", ... ({len(nodes) - 5} more)" if len(nodes) > 5 else "")
            why = f" ({reasons[op]})" if reasons and op in reasons else ""
            lines.append(f"  {op} x{len(nodes)}: {shown}{why}")
        where = f" in this {framework} model" if framework else ""
        super().__init__(f"{len(self.unsupported)} unsupported op type(s){where}:\n" + "\n".join(lines))


class ResourceLimitError(ExportError):
    """A size declared by a file or an option (array dims, a zip member, an op's attribute) is over the
    memory limit or the file's real size; checked before anything is allocated (exit code 3)."""


class InferenceError(BridgeError):
    """A runtime, or the source framework itself, failed running the model on the validation inputs.

    ``framework`` names who failed (``mxnet``, ``torch``, ``onnxruntime``, ...), ``node`` the node or
    layer when the framework's message names one. Exit code 3.
    """

    def __init__(self, framework: str, message: str, node: str | None = None) -> None:
        super().__init__(message)
        self.framework = framework
        self.node = node


class PassFailedError(BridgeError):
    """A pass of the ONNX stage rejected the model; names the pass and, when known, the node and op."""

    def __init__(self, pass_name: str, message: str, node: str | None = None, op: str | None = None) -> None:
        where = f" at {at_node(node, op, message)}" if node else f": {message}"
        super().__init__(f"pass {pass_name} failed{where}")
        self.pass_name = pass_name
        self.node = node
        self.op = op


class NodeError(BridgeError):
    """Raised inside a pass for a specific node; the pipeline turns it into PassFailedError with the pass name."""

    def __init__(self, node: str, op: str, message: str) -> None:
        super().__init__(message)
        self.node = node
        self.op = op


class RuntimeLoadError(BridgeError):
    """A target runtime refused to load the model; the message explains the runtime's error in plain words."""


class ValidationMismatch(BridgeError):
    """The converted model's outputs differ from the reference beyond tolerance (exit code 1).

    ``result`` is the ConvertResult / ValidateResult that failed, for scripts that want the figures.
    """

    exit_code = EXIT_MISMATCH

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class BridgeInternalError(Exception):
    """A bug in bridge itself (exit code 70). Deliberately *not* a BridgeError."""

    exit_code = EXIT_INTERNAL
