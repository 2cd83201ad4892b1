"""Options several commands share: where builds go, how stages run (jobs, cache, executor, events)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def execution_options(p: argparse.ArgumentParser) -> None:
    """`-n`, `--cache`, `--executor` and `--json`: for the commands that run stages."""
    p.add_argument("-n", "--jobs", type=int, default=1, metavar="N",
                   help="run N stages at once (worker processes; threads waiting on --executor)")
    p.add_argument("--cache", metavar="URL", help="shared cache of stage outputs: a directory or s3://BUCKET/PREFIX"
                   "[?endpoint=URL]")
    p.add_argument("--executor", metavar="dask://HOST:PORT", help="run stages on a Dask cluster (needs --cache)")
    p.add_argument("--json", action="store_true", help="one JSON event per line instead of progress text")


@contextmanager
def execution(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """The cache, executor, jobs and event sink the options name (for build and release)."""
    from etbuild.build.progress import make_sink

    cache = executor = None
    if args.cache:
        from etbuild.cache import open_cache

        cache = open_cache(args.cache)
    if args.executor:
        from etbuild.build.remote import executor_for

        executor = executor_for(args.executor, cache)
    sink = make_sink(sys.stdout, json_lines=args.json, parallel=args.jobs > 1, debug=args.debug)
    try:
        yield {"jobs": args.jobs, "cache": cache, "executor": executor, "sink": sink}
    finally:
        if executor is not None:
            executor.close()


def size(text: str) -> int:
    """A byte size as a command line gives it (`8GiB`, `512MB`, `1000`)."""
    from etbuild.runtime.runner import parse_bytes

    return parse_bytes(text)


def max_planned_bytes(p: argparse.ArgumentParser) -> None:
    """`--max-planned-bytes`: for the commands that load a program."""
    p.add_argument("--max-planned-bytes", type=size, metavar="SIZE",
                   help="most planned memory the program may ask for, e.g. 8GiB (default: a quarter of the RAM)")
