"""The error hierarchy: one class per kind of failure, each with its own CLI exit code.

User mistakes (a bad recipe, a bad input) are separate from broken invariants
(`InternalError`). The CLI prints the message, not a traceback, unless `--debug`.
"""


class EtbuildError(Exception):
    """Base of every error etbuild raises on purpose."""

    exit_code = 1


class RecipeError(EtbuildError):
    """A recipe is malformed: the message names file:line:column and the key path."""

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


class MethodInputError(EtbuildError):
    """A method was called with the wrong number, dtype or shape of inputs."""

    exit_code = 6


class KernelError(EtbuildError):
    """A kernel was asked to do something it cannot (shape beyond its bound, bad argument)."""

    exit_code = 7


class InternalError(EtbuildError):
    """An invariant of etbuild itself is broken: a bug to report, not a user mistake."""

    exit_code = 70


def printable(text: str, keep: str = "") -> str:
    """text with every character a terminal would act on (escape sequences, control and
    format characters, line breaks unless in `keep`) written as a Python escape: names read
    from a file are shown, not run."""
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in text)
