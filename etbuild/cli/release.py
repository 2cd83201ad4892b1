"""`etbuild release FILE`, `etbuild release verify DIR` and `etbuild release diff A B`."""

from __future__ import annotations

import argparse
from pathlib import Path

from etbuild.cli.command import Command
from etbuild.cli.options import execution, execution_options


def release_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("release", help="release file (releases/NAME.yaml)")
    p.add_argument("--build-dir", default="build")
    p.add_argument("--dist-dir", default="dist", help="the release goes to DIST/NAME-VERSION/")
    p.add_argument("--check-reproducible", action="store_true",
                   help="build twice in clean directories (no cache, different hash seeds) and compare the bytes")
    execution_options(p)


def run_release(args: argparse.Namespace) -> int:
    from etbuild.release import check_reproducible, make_release

    if args.check_reproducible:
        sums, dist = check_reproducible(Path(args.release), args.jobs, keep=Path(args.dist_dir))
        print(f"reproducible: two builds in clean directories gave identical bytes for all {len(sums)} files; "
              f"kept {dist}")
        return 0
    with execution(args) as options:
        result = make_release(args.release, dist_root=Path(args.dist_dir), build_root=Path(args.build_dir), **options)
    if not args.json:
        print(f"ok: release {result.release.dist_name} in {result.dist}: {len(result.release.products)} product(s), "
              f"{len(result.release.runtimes)} runtime(s), {len(result.sums)} files")
    return 0


def verify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir")
    p.add_argument("--key", help="the signer's Ed25519 public key (PEM), for a signed release")


def run_verify(args: argparse.Namespace) -> int:
    from etbuild.release import verify_dist

    print(f"ok: {args.dir}: {verify_dist(Path(args.dir), Path(args.key) if args.key else None)}")
    return 0


def diff_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a")
    p.add_argument("b")


def run_diff(args: argparse.Namespace) -> int:
    from etbuild.release import diff_dists

    print(diff_dists(Path(args.a), Path(args.b)))
    return 0


COMMANDS = (
    Command("release", "build, gate and package a release file (also: release verify DIR, release diff A B)",
            release_arguments, run_release),
    Command("release-verify", "check a release's digests, provenance and signature", verify_arguments, run_verify,
            hidden=True),
    Command("release-diff", "what one release changes against another, per product", diff_arguments, run_diff,
            hidden=True),
)
