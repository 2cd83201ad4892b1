"""The error hierarchy: one class per kind of failure, each with its own CLI exit code.

User mistakes (a bad recipe, a bad input) are separate from broken invariants
(`InternalError`). The CLI prints the message, not a traceback, unless `--debug`.
"""

import difflib


class EtbuildError(Exception):
    """Base of every error etbuild raises on purpose."""

    exit_code = 1


class RecipeError(EtbuildError):
    """A recipe is malformed: the message names file:line:column and the key path."""

    exit_code = 2


class UsageError(EtbuildError):
    """A command or call asked for something that does not exist (an unknown lowering step, ...)."""

    exit_code = 2


class StageError(EtbuildError):
    """A build stage could not do its job for this recipe (unsupported op, overflow, ...)."""

    exit_code = 3


class VerificationError(EtbuildError):
    """The program's outputs differ from eager PyTorch beyond the recipe's tolerances."""

    exit_code = 4


class InvalidProgram(EtbuildError):
    """A `.pte` file is malformed or refers to something that does not exist."""

    exit_code = 5


class InvalidData(InvalidProgram):
    """A `.ptd` weights file is malformed, or does not hold what a program asks of it (a key, a dtype, a size)."""


class InvalidBundle(InvalidProgram):
    """A bundled program (`.bpte`) is malformed or foreign: the message names the file and what is wrong."""


class InvalidETDump(InvalidProgram):
    """An ETDump is malformed or foreign, or its events do not fit the program it is read with."""


class InvalidETRecord(InvalidProgram):
    """An ETRecord (`etrecord.bin`) is malformed or foreign: the message names the file and what is wrong."""


class MethodInputError(EtbuildError):
    """A method was called with the wrong number, dtype or shape of inputs."""

    exit_code = 6


class KernelError(EtbuildError):
    """A kernel was asked to do something it cannot (shape beyond its bound, bad argument)."""

    exit_code = 7


class InternalError(EtbuildError):
    """An invariant of etbuild itself is broken: a bug to report, not a user mistake."""

    exit_code = 70


def did_you_mean(word: str, choices: list[str]) -> str:
    """` — did you mean 'x'?` for the closest choice, or ``."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" — did you mean '{close[0]}'?" if close else ""


class ReleaseError(EtbuildError):
    """A release gate failed: a budget was exceeded, or two builds of the same inputs differ."""

    exit_code = 8


class IntegrityError(EtbuildError):
    """A release directory does not match its SHA256SUMS, provenance or signature."""

    exit_code = 9


def error_class(exit_code: int) -> type[EtbuildError]:
    """The error class whose exit code is `exit_code` (EtbuildError when none is)."""
    def subclasses(base: type[EtbuildError]) -> list[type[EtbuildError]]:
        return [base, *[c for sub in base.__subclasses__() for c in subclasses(sub)]]

    return next((c for c in subclasses(EtbuildError)[1:] if c.exit_code == exit_code), EtbuildError)


def printable(text: str, keep: str = "") -> str:
    """text with every character a terminal would act on (escape sequences, control and
    format characters, line breaks unless in `keep`) written as a Python escape: names read
    from a file are shown, not run."""
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in text)
