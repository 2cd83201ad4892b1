"""The `etbuild` command: build recipes, run and inspect `.pte` files.

`COMMANDS` is the table of subcommands (one `Command` each, defined in `build`, `release` and
`programs`); the parser is made from it. `run`, `profile` and `inspect` import no torch, so
they work where only numpy is installed. Errors print one paragraph and exit with the error's
code; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys

from etbuild.cli import build, programs, release
from etbuild.cli.command import Command
from etbuild.errors import EtbuildError, printable

COMMANDS: tuple[Command, ...] = (*build.COMMANDS, *release.COMMANDS, *programs.COMMANDS)
ALIASES = {("release", "verify"): "release-verify", ("release", "diff"): "release-diff"}  # two-word commands


def parser() -> argparse.ArgumentParser:
    """The argument parser of every command in COMMANDS."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    p = argparse.ArgumentParser(prog="etbuild", description=__doc__.splitlines()[0])
    p.add_argument("--debug", action="store_true", dest="debug_first", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        shown = {} if command.hidden else {"help": command.help}
        c = sub.add_parser(command.name, parents=[common], description=command.help, **shown)
        command.arguments(c)
        c.set_defaults(fn=command.run)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command line; the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if tuple(argv[:2]) in ALIASES:
        argv = [ALIASES[tuple(argv[:2])], *argv[2:]]
    args = parser().parse_args(argv)
    args.debug = args.debug or args.debug_first
    try:
        return int(args.fn(args))
    except EtbuildError as exc:
        if args.debug:
            raise
        print("error: " + printable(str(exc), keep="\n"), file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (`etbuild inspect x.pte | head`): nothing to report
        sys.stderr.close()
        return 0
    except OSError as exc:
        if args.debug:
            raise
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
