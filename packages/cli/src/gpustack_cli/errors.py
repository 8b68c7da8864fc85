"""User errors as one line on stderr: exit 2 for a usage error, 1 for a runtime one.

A traceback is for a bug. What a user can fix (a bad flag, a missing or malformed recording, a
driver library that is not on this machine) is one line naming the command and the cause, or
one JSON object on one line where the command was given ``--log-json``, so a log pipeline gets
the failure in the same shape as the daemon's other lines.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

USAGE = 2
RUNTIME = 1

UsageError: type[Exception] = typer.BadParameter.__mro__[1]
"""click's ``UsageError`` (typer vendors click; its ``BadParameter`` derives from it)."""
ClickException: type[Exception] = typer.BadParameter.__mro__[2]
"""click's ``ClickException``: every error click reports with an exit code."""

NVML_ERRORS: dict[int, str] = {
    1: "uninitialized",
    2: "invalid argument",
    3: "not supported",
    4: "no permission",
    5: "already initialized",
    6: "not found",
    7: "insufficient size",
    8: "insufficient power",
    9: "driver not loaded",
    10: "timeout",
    11: "IRQ issue",
    12: "library not found: libnvidia-ml.so.1 is not on this machine's loader path",
    13: "function not found: the driver is older than the library call",
    14: "corrupted inforom",
    15: "GPU is lost",
    16: "reset required",
    17: "operating system call failed",
    18: "driver/library version mismatch",
    19: "in use",
    20: "out of memory",
    21: "no data",
    22: "vGPU ECC not enabled",
    23: "insufficient resources",
    999: "unknown error",
}
"""NVML's return codes (``nvmlReturn_t``) in words: a message names the code *and* its meaning."""

_NVML_CODE = re.compile(r"NVML error (\d+)\b(?! \()")


SIMULATOR_MISSING = (
    "this command needs the simulator, which is not installed: install gpustack-cli[simulator]"
)


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space.

    NVML codes are spelled out: ``NVML error 12`` reads ``NVML error 12 (library not found:
    …)``.
    """

    def spell(match: re.Match[str]) -> str:
        meaning = NVML_ERRORS.get(int(match.group(1)))
        return match.group(0) + (f" ({meaning})" if meaning else "")

    return _NVML_CODE.sub(spell, " ".join(str(text).split()))


def report(command: str, message: object, *, json_logs: bool = False) -> None:
    """Write the error ``command: message`` to stderr as one line (a JSON object if asked)."""
    line = f"{command}: {one_line(str(message))}"
    if json_logs:
        document = {
            "time": datetime.now(UTC).isoformat(),
            "level": "error",
            "logger": "gpustack_cli",
            "message": line,
        }
        line = json.dumps(document)
    typer.echo(line, err=True)


def fail(
    command: str, message: object, *, code: int = RUNTIME, json_logs: bool = False
) -> NoReturn:
    """Report ``message`` for ``command`` and exit with ``code``."""
    report(command, message, json_logs=json_logs)
    raise typer.Exit(code=code)


def user_error_types(*, library_errors: bool = True) -> tuple[type[BaseException], ...]:
    """What a user can fix: a recording that does not load, a file, a vendor library.

    ``library_errors=False`` leaves a library that does not open (or whose first call fails)
    to the caller.
    """
    from gpustack_core.decoding import ContractError
    from gpustack_vendors.calling import CallError
    from gpustack_vendors.loading import LibraryUnavailableError

    if not library_errors:
        return (ContractError, OSError)
    return (ContractError, OSError, LibraryUnavailableError, CallError)


@contextlib.contextmanager
def user_errors(
    command: str, *, json_logs: bool = False, library_errors: bool = True
) -> Iterator[None]:
    """Turn a user error raised inside into one line on stderr and exit 1."""
    try:
        yield
    except user_error_types(library_errors=library_errors) as exc:
        fail(command, exc, json_logs=json_logs)


def _has_log_json(error: Exception) -> bool:
    ctx = getattr(error, "ctx", None)
    command = getattr(ctx, "command", None)
    return any(getattr(p, "name", None) == "log_json" for p in getattr(command, "params", ()))


class OneLineErrors(TyperGroup):
    """The root group: click's usage errors as one line (not a box) and exit 2.

    Help for a group given no subcommand is still the help (click reports it as a usage error).
    """

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command tree; report click's own errors in one line."""
        argv = list(sys.argv[1:] if args is None else args)
        try:
            result = super().main(
                args=argv,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except UsageError as exc:
            if not standalone_mode:
                raise
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]
                sys.exit(getattr(exc, "exit_code", USAGE))
            ctx = getattr(exc, "ctx", None)
            path = ctx.command_path if ctx is not None else (prog_name or "gpustack-operator")
            json_logs = "--log-json" in argv and _has_log_json(exc)
            report(path, exc.format_message(), json_logs=json_logs)  # type: ignore[attr-defined]
            sys.exit(USAGE)
        except ClickException as exc:
            if not standalone_mode:
                raise
            report(prog_name or "gpustack-operator", exc.format_message())  # type: ignore[attr-defined]
            sys.exit(getattr(exc, "exit_code", RUNTIME))
        except ModuleNotFoundError as exc:
            # The simulator is an optional extra (a production install has no demo, replay or
            # --simulate): a command that needs it says so, not with a traceback.
            if not standalone_mode or not (exc.name or "").startswith("gpustack_simulator"):
                raise
            report(prog_name or "gpustack-operator", SIMULATOR_MISSING)
            sys.exit(RUNTIME)
        except typer.Abort:
            if not standalone_mode:
                raise
            typer.echo(f"{prog_name or 'gpustack-operator'}: aborted", err=True)
            sys.exit(RUNTIME)
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)
