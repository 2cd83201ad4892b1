"""The `etbuild` command: build recipes, run and inspect `.pte` files.

`run`, `profile` and `inspect` import no torch, so they work where only numpy is installed. Errors
print one paragraph and exit with the error's code; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from etbuild.errors import EtbuildError, printable


@contextmanager
def _execution(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
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


def _build(args: argparse.Namespace) -> int:
    from etbuild.build.driver import build
    from etbuild.recipe import discover_recipes

    paths = [Path(p) for p in args.recipes] or discover_recipes(args.recipes_dir)
    if not paths:
        print(f"no recipes under {args.recipes_dir}", file=sys.stderr)
        return 2
    with _execution(args) as options:
        result = build(paths, Path(args.build_dir), debug=args.debug, dump_after=args.dump_after, **options)
    if args.json:
        return result.exit_code
    ran, fresh = len(result.executed), len(result.up_to_date)
    status = "failed" if result.exit_code else "ok"
    print(f"{status}: {len(paths)} recipe(s), {ran} task(s) run, {fresh} up to date")
    if args.dump_after:
        print(f"lowering dumps: {args.build_dir}/<recipe>/dump/")
    return result.exit_code


def _select(args: argparse.Namespace) -> int:
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


def _release(args: argparse.Namespace) -> int:
    from etbuild.release import check_reproducible, make_release

    if args.check_reproducible:
        sums, dist = check_reproducible(Path(args.release), args.jobs, keep=Path(args.dist_dir))
        print(f"reproducible: two builds in clean directories gave identical bytes for all {len(sums)} files; "
              f"kept {dist}")
        return 0
    with _execution(args) as options:
        result = make_release(args.release, dist_root=Path(args.dist_dir), build_root=Path(args.build_dir), **options)
    if not args.json:
        print(f"ok: release {result.release.dist_name} in {result.dist}: {len(result.release.products)} product(s), "
              f"{len(result.release.runtimes)} runtime(s), {len(result.sums)} files")
    return 0


def _release_verify(args: argparse.Namespace) -> int:
    from etbuild.release import verify_dist

    print(f"ok: {args.dir}: {verify_dist(Path(args.dir), Path(args.key) if args.key else None)}")
    return 0


def _release_diff(args: argparse.Namespace) -> int:
    from etbuild.release import diff_dists

    print(diff_dists(Path(args.a), Path(args.b)))
    return 0


def _run(args: argparse.Namespace) -> int:
    from etbuild.runtime.runner import run_calls

    run_calls(Path(args.pte), Path(args.inputs), Path(args.out), args.method, args.calls, args.max_planned_bytes)
    return 0


def _profile(args: argparse.Namespace) -> int:
    from etbuild.runtime.program import Program
    from etbuild.runtime.runner import call_inputs
    from etbuild.tools.profile import generated_inputs, profile_method
    from etbuild.tools.profile_report import format_table, write_trace

    method = Program.load(args.pte).load_method(args.method, max_planned_bytes=args.max_planned_bytes)
    inputs = call_inputs(Path(args.inputs)) if args.inputs else generated_inputs(method, args.seed)
    profile = profile_method(method, inputs, args.calls)
    print(format_table(profile, args.top))
    if args.trace:
        write_trace(args.trace, profile, args.pte)
        print(f"\ntrace: {args.trace} ({len(profile.events):,} events; open it in https://ui.perfetto.dev)")
    return 0


def _generate(args: argparse.Namespace) -> int:
    from etbuild.tools.generate import generate, greedy

    prompt = _token_list(args.prompt)
    if args.runtime == "executorch":
        from etbuild.extras import require

        require("executorch.runtime", "interop")
        from etbuild.verify.oracle import executorch_methods

        tokens = greedy(*executorch_methods(Path(args.pte), "prefill", "decode"), prompt, args.tokens)
    else:
        tokens = generate(args.pte, prompt, args.tokens)
    print(" ".join(map(str, tokens)))
    return 0


def _token_list(text: str) -> list[int]:
    from etbuild.errors import UsageError

    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise UsageError(f"--prompt {text!r}: expected token ids, e.g. 1,2,3") from None


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
    _execution_options(b)
    b.add_argument("--dump-after", action="append", default=[], metavar="STEP",
                   help="write the form after lowering step STEP (or 'all') to build/<recipe>/dump/; repeatable")
    b.set_defaults(fn=_build)
    rel = sub.add_parser("release", parents=[common], help="build, gate and package a release file "
                         "(also: release verify DIR, release diff A B)")
    rel.add_argument("release", help="release file (releases/NAME.yaml)")
    rel.add_argument("--build-dir", default="build")
    rel.add_argument("--dist-dir", default="dist", help="the release goes to DIST/NAME-VERSION/")
    rel.add_argument("--check-reproducible", action="store_true",
                     help="build twice in clean directories (no cache, different hash seeds) and compare the bytes")
    _execution_options(rel)
    rel.set_defaults(fn=_release)
    rv = sub.add_parser("release-verify", parents=[common], help=argparse.SUPPRESS)
    rv.add_argument("dir")
    rv.add_argument("--key", help="the signer's Ed25519 public key (PEM), for a signed release")
    rv.set_defaults(fn=_release_verify)
    rd = sub.add_parser("release-diff", parents=[common], help=argparse.SUPPRESS)
    rd.add_argument("a")
    rd.add_argument("b")
    rd.set_defaults(fn=_release_diff)
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
    pr = sub.add_parser("profile", parents=[common], help="time each instruction and delegate node of a .pte")
    pr.add_argument("pte")
    pr.add_argument("--inputs", help="an .npz with in0, in1, … (default: random inputs from the method's metadata)")
    pr.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    pr.add_argument("--method", default="forward")
    pr.add_argument("--calls", type=int, default=10, help="timed calls (medians over them)")
    pr.add_argument("--top", type=int, default=20, help="rows per table")
    pr.add_argument("--trace", metavar="trace.json", help="write a Chrome trace (opens in Perfetto)")
    pr.add_argument("--max-planned-bytes", type=_size, metavar="SIZE")
    pr.set_defaults(fn=_profile)
    g = sub.add_parser("generate", parents=[common], help="greedy generation with a prefill/decode language model")
    g.add_argument("pte")
    g.add_argument("--prompt", required=True, help="prompt token ids, e.g. 1,2,3")
    g.add_argument("--tokens", type=int, default=32, help="how many tokens to generate (default 32)")
    g.add_argument("--runtime", choices=("etbuild", "executorch"), default="etbuild",
                   help="whose runtime runs the .pte (executorch: the interop extra's oracle)")
    g.set_defaults(fn=_generate)
    i = sub.add_parser("inspect", parents=[common], help="summarize a .pte: methods, operators, sizes")
    i.add_argument("pte")
    i.add_argument("--json", action="store_true")
    i.add_argument("--memory", action="store_true", help="per memory level: planned bytes, lower bound, tensors")
    i.set_defaults(fn=_inspect)
    return p


def _execution_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--jobs", type=int, default=1, metavar="N",
                   help="run N stages at once (worker processes; threads waiting on --executor)")
    p.add_argument("--cache", metavar="URL", help="shared cache of stage outputs: a directory or s3://BUCKET/PREFIX"
                   "[?endpoint=URL]")
    p.add_argument("--executor", metavar="dask://HOST:PORT", help="run stages on a Dask cluster (needs --cache)")
    p.add_argument("--json", action="store_true", help="one JSON event per line instead of progress text")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["release"] and argv[1:2] in (["verify"], ["diff"]):
        argv = [f"release-{argv[1]}", *argv[2:]]  # `etbuild release verify DIR`, `etbuild release diff A B`
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
