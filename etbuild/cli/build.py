"""`etbuild build` (recipes end to end) and `etbuild select --union` (one runtime for several)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from etbuild.cli.command import Command
from etbuild.cli.options import execution, execution_options


def build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipes", nargs="*", help="recipe files")
    p.add_argument("--recipes-dir", default="recipes")
    p.add_argument("--build-dir", default="build")
    execution_options(p)
    p.add_argument("--dump-after", action="append", default=[], metavar="STEP",
                   help="write the form after lowering step STEP (or 'all') to build/<recipe>/dump/; repeatable")


def run_build(args: argparse.Namespace) -> int:
    from etbuild.build.driver import build
    from etbuild.recipe import discover_recipes

    paths = [Path(p) for p in args.recipes] or discover_recipes(args.recipes_dir)
    if not paths:
        print(f"no recipes under {args.recipes_dir}", file=sys.stderr)
        return 2
    with execution(args) as options:
        result = build(paths, Path(args.build_dir), debug=args.debug, dump_after=args.dump_after, **options)
    if args.json:
        return result.exit_code
    ran, fresh = len(result.executed), len(result.up_to_date)
    failed = sorted({task.partition(":")[2] for task in result.failed})
    status = f"failed: {len(failed)} of" if result.exit_code else "ok:"
    print(f"{status} {len(paths)} recipe(s), {ran} task(s) run, {fresh} up to date"
          + (f" (failed: {', '.join(failed)})" if failed else ""))
    if args.dump_after:
        print(f"lowering dumps: {args.build_dir}/<recipe>/dump/")
    return result.exit_code


def select_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--union", nargs="+", required=True, metavar="RECIPE", help="recipe files")
    p.add_argument("--name", default="union", help="name of the union runtime (build/union/NAME)")
    p.add_argument("--build-dir", default="build")


def run_select(args: argparse.Namespace) -> int:
    from etbuild.build.driver import build
    from etbuild.build.union import run_union
    from etbuild.recipe import load_recipe

    paths = [Path(p) for p in args.union]
    built = build(paths, Path(args.build_dir), debug=args.debug)
    if built.exit_code:
        return built.exit_code
    report = run_union([load_recipe(p) for p in paths], Path(args.build_dir), args.name)
    failed = [name for name, ok in report["recipes"].items() if not ok]
    print(f"union runtime {args.build_dir}/union/{args.name}/runtime: {len(report['operators'])} operators, "
          f"{report['runtime_bytes']:,} bytes ({report['runtime_fraction']:.1%} of the full runtime's "
          f"{report['full_runtime_bytes']:,}); verified: {', '.join(report['recipes'])}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 4 if failed else 0


COMMANDS = (
    Command("build", "build recipes (all under --recipes-dir by default)", build_arguments, run_build),
    Command("select", "one trimmed runtime for several recipes", select_arguments, run_select),
)
