"""Errors as data: a message and a hint, formatted only by the CLI.

Exit codes (documented in the README):
  0 ok, 1 unexpected internal error, 2 bad input (arguments, sizes, names),
  3 model file format, 4 probe / hardware, 5 infeasible plan, 6 runner failed,
  130 interrupted (Ctrl-C, 128 + SIGINT as shells report it).
"""
from __future__ import annotations


class MoeplanError(Exception):
    """Base class. `message` says what is wrong, `hint` what to do next."""

    exit_code = 1
    kind = "error"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "hint": self.hint,
                "exit_code": self.exit_code}


class InputError(MoeplanError):
    """Bad command-line input: an unknown name, an unparsable size, a conflict."""

    exit_code = 2
    kind = "input"


class ModelFormatError(MoeplanError):
    """A model file or folder that cannot be read: truncated, corrupt, unsupported."""

    exit_code = 3
    kind = "model-format"


class ProbeError(MoeplanError):
    """The machine could not be measured or a hardware profile is unusable."""

    exit_code = 4
    kind = "probe"


class InfeasibleError(MoeplanError):
    """No placement fits the memory budgets."""

    exit_code = 5
    kind = "infeasible"


class RunnerError(MoeplanError):
    """A benchmark runner (executor, llama-bench) failed, timed out or is missing."""

    exit_code = 6
    kind = "runner"


class Interrupted(MoeplanError):
    """The user pressed Ctrl-C (SIGINT): exit 130 as a shell reports a process killed by it."""

    exit_code = 130
    kind = "interrupted"
