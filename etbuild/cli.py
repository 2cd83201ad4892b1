"""The `etbuild` command: build recipes, run and inspect `.pte` files.

`run` and `inspect` import no torch, so they work where only numpy is installed. Errors
print one paragraph and exit with the error's code; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from etbuild.errors import EtbuildError, printable


def _build(args: argparse.Namespace) -> int:
    from etbuild.build import build
    from etbuild.recipe import discover_recipes

    paths = [Path(p) for p in args.recipes] or discover_recipes(args.recipes_dir)
    if not paths:
        print(f"no recipes under {args.recipes_dir}", file=sys.stderr)
        return 2
    result = build(paths, Path(args.build_dir), debug=args.debug)
    ran, fresh = len(result.executed), len(result.up_to_date)
    status = "failed" if result.exit_code else "ok"
    print(f"{status}: {len(paths)} recipe(s), {ran} task(s) run, {fresh} up to date")
    return 3 if result.exit_code else 0


def _select(args: argparse.Namespace) -> int:
    from etbuild.build import build
    from etbuild.recipe import load_recipe
    from etbuild.stages.select import run_union

    paths = [Path(p) for p in args.union]
    if build(paths, Path(args.build_dir), debug=args.debug).exit_code:
        return 3
    report = run_union([load_recipe(p) for p in paths], Path(args.build_dir), args.name)
    failed = [name for name, ok in report["recipes"].items() if not ok]
    print(f"union runtime {args.build_dir}/union/{args.name}/runtime: {len(report['operators'])} operators, "
          f"{report['runtime_bytes']:,} bytes ({report['runtime_fraction']:.1%} of the full runtime's "
          f"{report['full_runtime_bytes']:,}); verified: {', '.join(report['recipes'])}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 4 if failed else 0


def _run(args: argparse.Namespace) -> int:
    from etbuild.runtime.runner import run_calls

    run_calls(Path(args.pte), Path(args.inputs), Path(args.out), args.method, args.calls, args.max_planned_bytes)
    return 0


def _size(text: str) -> int:
    from etbuild.runtime.runner import parse_bytes

    return parse_bytes(text)


def _inspect(args: argparse.Namespace) -> int:
    from etbuild.runtime.inspect import describe, format_description

    if args.memory:
        from etbuild.memory.measure import memory_tables

        print(printable(memory_tables(args.pte), keep="\n"))
        return 0
    d = describe(args.pte)
    print(json.dumps(d, indent=2) if args.json else format_description(d))
    return 0


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    p = argparse.ArgumentParser(prog="etbuild", description=__doc__.splitlines()[0])
    p.add_argument("--debug", action="store_true", dest="debug_first", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", parents=[common], help="build recipes (all under --recipes-dir by default)")
    b.add_argument("recipes", nargs="*", help="recipe files")
    b.add_argument("--recipes-dir", default="recipes")
    b.add_argument("--build-dir", default="build")
    b.set_defaults(fn=_build)
    s = sub.add_parser("select", parents=[common], help="one trimmed runtime for several recipes")
    s.add_argument("--union", nargs="+", required=True, metavar="RECIPE", help="recipe files")
    s.add_argument("--name", default="union", help="name of the union runtime (build/union/NAME)")
    s.add_argument("--build-dir", default="build")
    s.set_defaults(fn=_select)
    r = sub.add_parser("run", parents=[common], help="run a .pte on inputs in0, in1, … from an .npz file")
    r.add_argument("pte")
    r.add_argument("--inputs", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--method", default="forward")
    r.add_argument("--calls", type=int, default=1)
    r.add_argument("--max-planned-bytes", type=_size, metavar="SIZE",
                   help="most planned memory the program may ask for, e.g. 8GiB (default: a quarter of the RAM)")
    r.set_defaults(fn=_run)
    i = sub.add_parser("inspect", parents=[common], help="summarize a .pte: methods, operators, sizes")
    i.add_argument("pte")
    i.add_argument("--json", action="store_true")
    i.add_argument("--memory", action="store_true", help="per memory level: planned bytes, lower bound, tensors")
    i.set_defaults(fn=_inspect)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.debug = args.debug or args.debug_first
    fn: Callable[[argparse.Namespace], int] = args.fn
    try:
        return fn(args)
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


if __name__ == "__main__":
    sys.exit(main())
