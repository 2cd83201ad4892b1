"""One `etbuild` command: its name, its help line, its arguments and what it runs.

Each module of `etbuild.cli` defines its commands as `Command` values; `etbuild.cli.COMMANDS`
is the table the parser is built from, so a new command is one module and one table entry.
Commands import what they run inside `run`, so `etbuild run` and `etbuild inspect` import no
torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """A subcommand: `arguments` adds its options to its parser, `run` returns the exit code.

    hidden: not listed in `etbuild --help` (`release-verify` is reached as `release verify`).
    """

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    hidden: bool = False
