"""Wall time of the example release: cold, warm (every stage from the cache), up to date, and -n 2.

    python benchmarks/release.py [releases/example.yaml] [--json out.json]

Each case runs `make_release` in this process on fresh directories under a temporary folder:
- cold: an empty build directory and an empty cache (every stage runs, serially);
- warm: a fresh build directory and the cache the cold run filled (every stage fetched);
- up to date: the cold run's build directory again (doit finds every stage up to date);
- cold -n 2: an empty build directory, no cache, two worker processes.
Every case also regenerates the runtimes and verifies and times each product on them.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import results  # benchmarks/results.py (the script's folder is on sys.path)

from etbuild.cache import open_cache
from etbuild.release import make_release

ROOT = Path(__file__).resolve().parents[1]


def timed(release: Path, tmp: Path, case: str, build: str, **options: Any) -> dict[str, Any]:
    start = time.perf_counter()
    result = make_release(release, dist_root=tmp / f"dist-{case}", build_root=tmp / build, stream=io.StringIO(),
                          **options)
    seconds = time.perf_counter() - start
    ran = len(result.build.rebuilt)
    print(f"  {case:<12} {seconds:7.1f} s  ({ran} stage(s) run, {len(result.build.executed) - ran} fetched, "
          f"{len(result.build.up_to_date)} up to date)", file=sys.stderr)
    return {"seconds": round(seconds, 2), "stages_run": ran, "fetched": len(result.build.executed) - ran,
            "up_to_date": len(result.build.up_to_date)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("release", nargs="?", default=str(ROOT / "releases" / "example.yaml"))
    p.add_argument("--json", help="also write the numbers to this file")
    results.add_option(p, "release")
    args = p.parse_args()
    release = Path(args.release)
    with tempfile.TemporaryDirectory(prefix="etbuild-bench-release-") as folder:
        tmp = Path(folder)
        cache = open_cache(str(tmp / "cache"))
        print(f"{release}:", file=sys.stderr)
        cases = {
            "cold": timed(release, tmp, "cold", "build-cold", cache=cache),
            "warm": timed(release, tmp, "warm", "build-warm", cache=cache),
            "up to date": timed(release, tmp, "up to date", "build-cold"),
            "cold -n 2": timed(release, tmp, "cold -n 2", "build-n2", jobs=2),
        }
    if args.json:
        Path(args.json).write_text(json.dumps({"release": str(release), "cases": cases}, indent=2) + "\n")
    if args.results:
        results.save(args.results, [{"case": case, **numbers} for case, numbers in cases.items()],
                     title=f"Wall time of the release {release.name}", notes=[
                         "cold: empty build dir and cache; warm: fresh build dir, every stage from the cache; "
                         "up to date: the cold build dir again; cold -n 2: two worker processes"])


if __name__ == "__main__":
    main()
